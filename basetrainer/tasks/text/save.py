"""Saving back in the model's own format: ``model/model_final/`` at the end of a run, and the merged folder
``basetrainer export`` writes.

``model_final/`` is what ``save_pretrained`` writes: without LoRA the whole model (``config.json``,
``model.safetensors``, ``generation_config.json``), with LoRA the adapter (``adapter_config.json``,
``adapter_model.safetensors``, naming the base model's folder or hub name), and the tokenizer either way.
``transformers`` loads either (``AutoModelForCausalLM.from_pretrained``; an adapter folder through ``peft``),
``peft`` the adapter (``PeftModel.from_pretrained(base, folder)``). :func:`export_pretrained` merges an
adapter into its base weights and writes a plain ``save_pretrained`` folder, the form serving engines (vLLM)
load, after checking that the merged model gives the adapter model's logits.
"""
import os
import shutil

import torch

from ...distributed import comm
from ...engine.events import LOWEST, Callback
from ...errors import CheckpointError
from ...parallel import unwrap_model
from ...utils.log import get_logger
from .hub import is_local, require
from .pretrained import quiet_peft

FINAL_FOLDER = "model_final"
CHECK_PROMPT = "What is 12 plus 7?"
CHECK_TOLERANCE = 1e-4  # float32 logits: merging W + BA into W rounds once per weight


class SavePretrained(Callback):
    """At the end of training writes ``model_dir/model_final/`` (see the module docstring) from the full weights
    (every process takes part: under FSDP they are gathered shard by shard), the tokenizer and, for an adapter,
    the base model named by its absolute path when it is a folder."""

    priority = LOWEST + 5  # after the checkpoints

    def __init__(self, model_dir: str, tokenizer, base_model: str, logger=None):
        super().__init__()
        self.folder = os.path.join(model_dir, FINAL_FOLDER)
        self.tokenizer, self.base_model = tokenizer, base_model
        self.logger = logger or get_logger()

    def on_train_end(self, logs=None):
        trainer = self.trainer
        weights = trainer.strategy.model_state_dict(trainer.model)
        if comm.is_main_process():
            save_pretrained(unwrap_model(trainer.model), weights, self.tokenizer, self.folder, self.base_model)
            kind = "the LoRA adapter" if _is_peft(unwrap_model(trainer.model)) else "the model"
            self.logger.info("saved %s and its tokenizer to %s (save_pretrained)", kind, self.folder)
        comm.synchronize()


def save_pretrained(model, weights: dict, tokenizer, folder: str, base_model: str) -> None:
    """``model.save_pretrained(folder)`` of ``weights`` (full, prefix-free: the strategy's), written to a
    temporary folder and moved into place, so a folder that exists is complete."""
    staging = f"{folder}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    if _is_peft(model):
        for config in model.peft_config.values():
            config.base_model_name_or_path = os.path.abspath(os.path.expanduser(base_model)) \
                if is_local(base_model) else base_model
    config = _base(model).config
    trained_without, config.use_cache = config.use_cache, True  # the saved model generates with its cache
    try:
        model.save_pretrained(staging, state_dict=weights)
    finally:
        config.use_cache = trained_without
    tokenizer.save_pretrained(staging)
    generation = getattr(_base(model), "generation_config", None)
    if generation is not None and not os.path.isfile(os.path.join(staging, "generation_config.json")):
        generation.save_pretrained(staging)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(staging, folder)


def _is_peft(model) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "merge_and_unload")


def _base(model):
    """The transformers model inside a ``PeftModel``."""
    return model.get_base_model() if _is_peft(model) else model


def export_pretrained(folder: str, out: str):
    """Writes ``folder`` (a run's ``model_final/``) to ``out`` as one plain ``save_pretrained`` folder: an adapter
    merged into its base weights (``merge_and_unload``), the tokenizer and the generation config beside it.
    Returns ``(kind, max_abs_diff)``: what was written, and the largest difference between the logits of the
    written model and of the folder's on a prompt (an adapter's: 0 up to rounding)."""
    transformers = require("transformers")
    transformers.utils.logging.disable_progress_bar()
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise CheckpointError(f"--out {out}: it exists and is not an empty folder; choose a new folder")
    adapter = os.path.isfile(os.path.join(folder, "adapter_config.json"))
    classifier = _is_classifier(folder)
    if adapter:
        peft = require("peft")
        auto = peft.AutoPeftModelForSequenceClassification if classifier else peft.AutoPeftModelForCausalLM
        # a classifier's base is made with the head the adapter trained (its rows: the labels)
        options = {"num_labels": _head_rows(folder)} if classifier else {}
        with quiet_peft():
            source = auto.from_pretrained(folder, **options)
            merged = auto.from_pretrained(folder, **options).merge_and_unload()
    else:
        auto = transformers.AutoModelForSequenceClassification if classifier else transformers.AutoModelForCausalLM
        source = merged = auto.from_pretrained(folder)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    merged.save_pretrained(out)
    tokenizer.save_pretrained(out)
    written = auto.from_pretrained(out) if not adapter else \
        (transformers.AutoModelForSequenceClassification if classifier else transformers.AutoModelForCausalLM
         ).from_pretrained(out)
    batch = tokenizer([CHECK_PROMPT], return_tensors="pt")
    with torch.no_grad():
        expected = source.eval()(**batch).logits
        got = written.eval()(**batch).logits
    return ("the LoRA adapter merged into its base weights" if adapter else "the model"), \
        float((expected - got).abs().max())


def _head_rows(folder: str) -> int:
    """The outputs of the classifier head an adapter folder holds (peft saves a new head whole)."""
    from safetensors import safe_open

    with safe_open(os.path.join(folder, "adapter_model.safetensors"), "pt") as weights:
        heads = [weights.get_slice(key).get_shape()[0] for key in weights.keys()
                 if key.endswith("weight") and ".lora_" not in key]
    if not heads:
        raise CheckpointError(f"{folder}: a classifier's adapter without its head; it was not written by a text run")
    return heads[0]


def _is_classifier(folder: str) -> bool:
    """Whether the folder's model (or an adapter's base) is a sequence classifier."""
    import json

    for name, key in (("adapter_config.json", "task_type"), ("config.json", "architectures")):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as stream:
                value = json.load(stream).get(key) or ""
            return "SEQ_CLS" in str(value) or "SequenceClassification" in str(value)
    return False
