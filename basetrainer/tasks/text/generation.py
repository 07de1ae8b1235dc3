"""Completions of fixed prompts at each evaluation: what the model has learnt, read as text.

Greedy decoding (the same text every run), the prompts padded on the left as a decoder-only model needs, under
the run's autocast. Every process generates (under FSDP each forward gathers the parameters, so all take part);
the main process writes the lines to the log, to ``log/completions.jsonl`` (one record per completion: step,
epoch, prompt, completion), a file the trackers receive at the end of training, and as text to the run's
loggers (TensorBoard's text tab, an MLflow text file per evaluation, W&B), at the step of their scalars.
"""
import json
import os

import torch

from ...distributed import comm
from ...engine.events import LOW, Callback
from ...parallel import unwrap_model
from ...utils.log import get_logger

COMPLETIONS_FILE = "completions.jsonl"


class Completions(Callback):
    """Generates up to ``max_new_tokens`` tokens after each of ``prompts`` (texts as the model reads them: chat
    prompts already through the template) at every evaluation's end; ``shown`` are the prompts as the log shows
    them."""

    priority = LOW

    def __init__(self, tokenizer, prompts, max_new_tokens: int, log_dir: str, shown=None, templated=False,
                 logger=None, loggers=None):
        super().__init__()
        self.loggers = loggers  # a LogHistory's LoggerFanOut: the trackers get the completions as text
        self.templated = templated  # chat prompts: the template wrote the start token
        self.tokenizer, self.prompts, self.max_new_tokens = tokenizer, list(prompts), max_new_tokens
        self.shown = list(shown or prompts)
        self.path = os.path.join(log_dir, COMPLETIONS_FILE)
        self.logger = logger or get_logger()

    def on_evaluation_end(self, logs=None):
        if not self.prompts:
            return
        texts = generate(self.trainer, self.tokenizer, self.prompts, self.max_new_tokens, templated=self.templated)
        if not comm.is_main_process():
            return
        state = self.state
        lines = [f"completions at step {state.global_step}:"]
        lines += [f"  {shown!r} -> {text!r}" for shown, text in zip(self.shown, texts)]
        self.logger.info("\n".join(lines))
        with open(self.path, "a", encoding="utf-8") as stream:
            for shown, text in zip(self.shown, texts):
                stream.write(json.dumps({"step": state.global_step, "epoch": state.epoch + 1, "prompt": shown,
                                         "completion": text}) + "\n")
        if self.loggers is not None:  # on the axis of the loggers' scalars: the global batch
            self.loggers.log_text("completions", "\n".join(lines[1:]),
                                  state.epoch * (state.batches_per_epoch or 0) + state.batch)


@torch.no_grad()
def generate(trainer, tokenizer, prompts, max_new_tokens: int, templated: bool = False) -> list:
    """The greedy completions (new text only) of ``prompts`` by ``trainer.model`` (``templated``: the prompts went
    through a chat template, which writes its own start token)."""
    model = unwrap_model(trainer.model)
    was_training = model.training
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    try:
        model.eval()
        batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=not templated)
        batch = {key: value.to(trainer.device) for key, value in batch.items()}
        with trainer.autocast():
            output = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False, use_cache=True,
                                    pad_token_id=tokenizer.pad_token_id)
        new = output[:, batch["input_ids"].shape[1]:]
        return [text.strip() for text in tokenizer.batch_decode(new, skip_special_tokens=True)]
    finally:
        tokenizer.padding_side = side
        model.train(was_training)

