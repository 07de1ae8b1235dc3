"""Fine-tuning a pretrained transformer: the pipeline behind ``examples/finetune_text.py`` and
``basetrainer train --task text``.

::

    python examples/finetune_text.py       # a tiny Llama-like model on the bundled data, offline
    basetrainer train --task text --model Qwen/Qwen2.5-0.5B --train_data data.jsonl lora.r=16 amp=bf16
    basetrainer train --task text --distributed --gpu_id 0 1 strategy=fsdp   # FSDP2, decoder layers

A run writes to ``work_dir`` what the other tasks' do (``config.yaml``, ``model/`` with ``last.pth`` to resume
from, ``log/``) and ``model/model_final/``, a ``save_pretrained`` folder (:mod:`~basetrainer.tasks.text.save`); the log shows the
parameters that train, the test loss and perplexity, tokens per second, and completions of fixed prompts at
each evaluation (:mod:`~basetrainer.tasks.text.generation`).

:class:`TextTrainer` fills in the ``EngineTrainer`` hooks with the library's own objects: a ``datasets``
dataset encoded by the tokenizer (:mod:`~basetrainer.tasks.text.data`, :mod:`~basetrainer.tasks.text.encoding`), the ``transformers`` model (in a
``PeftModel`` with LoRA, :mod:`~basetrainer.tasks.text.pretrained`) wrapped by the engine's strategy, AdamW over the parameters that
train. With LoRA the checkpoints hold only those (``checkpoint_frozen_weights``): the frozen base comes back
from ``model`` when a run resumes.
"""
import os

import torch
import torch.nn.functional as F

from ...callbacks import EarlyStopping, LogHistory, ModelCheckpoint
from ...engine.trainer import EngineTrainer
from ...errors import ConfigError
from ...loggers import build_loggers, check_loggers
from ...optimizer.build_optimizer import get_optimizer
from ...parallel.activation_checkpointing import named_blocks
from ...parallel.base import unwrap_model
from ...scheduler.build_scheduler import get_scheduler
from ..common.startup import EVALUATION_OFF, launch_task, run_or_clean_up, start_run, starts_rank_0, task_main
from . import data
from .config import check_task_config, parse_config
from .encoding import Collator
from .generation import COMPLETIONS_FILE, Completions
from .hub import check_model_source
from .losses import WindowTokens, learnt_tokens, token_losses, training_loss
from .pretrained import load_model, load_tokenizer, parameter_counts
from .recorders import TokenLossRecorder, TokenThroughput
from .save import FINAL_FOLDER, SavePretrained
from .settings import DEFAULT_MODEL
from .tiny_models import write_tiny_model


class TextTrainer(EngineTrainer):
    """Fine-tunes ``cfg.model`` on ``cfg.train_data`` and evaluates it on ``cfg.test_data`` every epoch (or every
    ``eval_every_n_iters`` steps)."""

    resume_settings = (*EngineTrainer.resume_settings, "lr", "batch_size", "optim_type", "weight_decay", "scheduler",
                       "milestones", "num_warn_up", "model", "lora", "max_seq_len", "packing", "train_data")

    def __init__(self, cfg):
        super().__init__(cfg)
        self.classifier = cfg.task_type == "sequence_classification"
        self.tokenizer = load_tokenizer(cfg)
        self.checkpoint_frozen_weights = cfg.lora["r"] == 0  # LoRA: checkpoints hold what trains, no more
        start_run(self, cfg, train_from=cfg.train_data, test_from=data.test_source(cfg), data_line=self._data_line,
                  model_line=self._model_line)

    # ------------------------------------------------------------------ data
    def build_train_loader(self, cfg, **kwargs):
        records = data.read_records(cfg.train_data, "train", cfg.task_type, cfg.data_config, key="train_data")
        labels = None
        if self.classifier:
            encoder_probe = data.build_encoder(records, self.tokenizer, cfg, "train_data", labels=[])
            labels = data.label_names(records, encoder_probe.fields["label"], "train_data")
            if cfg.num_labels is not None and cfg.num_labels != len(labels):
                raise ConfigError(f"num_labels {cfg.num_labels} does not match the {len(labels)} labels of "
                                  f"{cfg.train_data}; set num_labels: null to read it from the data")
            cfg.num_labels, cfg.labels = len(labels), [str(label) for label in labels]
        self.labels = labels
        self.encoder = data.build_encoder(records, self.tokenizer, cfg, "train_data", labels=labels)
        samples = data.encode(records, self.encoder, packing=cfg.packing and not self.classifier,
                              max_samples=cfg.max_samples, key="train_data")
        loader = self.build_dataloader(samples, cfg.batch_size, self.num_workers, phase="train", shuffle=True,
                                       collate_fn=Collator(self.tokenizer.pad_token_id))
        # replica groups deal the batches as the groups alive stand: no order to read ahead
        ahead = not self.classifier and self.replica_groups is None
        self.window_tokens = WindowTokens(loader, learnt_tokens(samples)) if ahead else None
        return loader

    def build_test_loader(self, cfg, **kwargs):
        self.test_records = None
        source = data.test_source(cfg)
        if not source:
            return None
        records = data.read_records(source, "test", cfg.task_type, cfg.data_config, key="test_data")
        encoder = data.build_encoder(records, self.tokenizer, cfg, "test_data", labels=self.labels)
        self.test_records = records
        samples = data.encode(records, encoder, packing=cfg.packing and not self.classifier,
                              max_samples=cfg.max_samples, key="test_data")
        # Sharded without padding: every test token is counted once, whatever the number of processes.
        return self.build_dataloader(samples, cfg.batch_size, self.num_workers, phase="test", shuffle=False,
                                     collate_fn=Collator(self.tokenizer.pad_token_id))

    # ------------------------------------------------------------------ model
    def build_model(self, cfg, **kwargs):
        model = load_model(cfg, self.tokenizer, self.labels)
        self.block_classes = named_blocks(model)
        self.trainable, self.total_parameters = parameter_counts(model)
        return self.build_model_parallel(model, cfg.gpu_id)

    def build_criterion(self, cfg, **kwargs):
        return None  # the losses are the task's own (run_step), computed as the HF models compute theirs

    def build_optimizer(self, cfg, **kwargs):
        # The parameters that train, and no others: with LoRA the optimizer keeps state for the adapters alone.
        trainable = [parameter for parameter in self.model.parameters() if parameter.requires_grad]
        return get_optimizer(trainable, optim_type=cfg.optim_type, lr=cfg.lr, momentum=cfg.momentum,
                             weight_decay=cfg.weight_decay, exclude_bias_norm_from_decay=True)

    def build_callbacks(self, cfg, **kwargs):
        indicators = ["loss", "Acc"] if self.classifier else ["loss", "perplexity"]
        monitor_mode = cfg.monitor_mode or ("max" if cfg.monitor == "Acc" else "min")
        artifacts = [os.path.join(self.log_dir, COMPLETIONS_FILE)]
        history = LogHistory(self.log_dir, log_freq=cfg.log_freq, logger=self.logger, indicators=indicators,
                             is_main_process=self.is_main_process,
                             loggers=build_loggers(cfg.loggers, self.log_dir, cfg, indicators=indicators),
                             artifacts=artifacts)
        return [
            TokenLossRecorder(accuracy=self.classifier),
            TokenThroughput(logger=self.logger),
            get_scheduler(cfg.scheduler, optimizer=self.optimizer, lr_init=cfg.lr, num_epochs=cfg.num_epochs,
                          num_steps=self.num_batches, milestones=cfg.milestones, num_warn_up=cfg.num_warn_up,
                          max_iters=cfg.max_iters),
            self._completions(cfg, history),
            EarlyStopping(cfg.monitor, patience=cfg.early_stopping_patience, mode=monitor_mode)
            if cfg.early_stopping_patience > 0 else None,
            history,
            ModelCheckpoint(model_dir=self.model_dir, epochs=cfg.num_epochs, indicator=cfg.monitor, mode=monitor_mode,
                            logger=self.logger, save_best_k=cfg.save_best_k, save_final=False,
                            every_n_iters=cfg.checkpoint_every_n_iters,
                            every_n_minutes=cfg.checkpoint_every_n_minutes),
            SavePretrained(self.model_dir, self.tokenizer, cfg.model, logger=self.logger),
        ]

    def _completions(self, cfg, history):
        """The completions callback of a causal LM with prompts: ``generate.prompts``, else the first
        ``generate.count`` prompts of the test data; ``history``'s loggers get them too."""
        settings = cfg.generate
        if self.classifier or not settings["count"] and not settings["prompts"]:
            return None
        if settings["prompts"]:
            shown = list(settings["prompts"])
            prompts = [self.encoder.chat_prompt([{"role": "user", "content": text}]) for text in shown] \
                if self.encoder.format == "chat" else shown
        elif self.test_records is not None:
            chosen = self.test_records.select(range(min(settings["count"], len(self.test_records))))
            prompts = [self.encoder.prompt_text(record) for record in chosen]
            shown = [record.get(cfg.fields["prompt"]) or prompt for record, prompt in zip(chosen, prompts)]
        else:
            return None
        return Completions(self.tokenizer, prompts, settings["max_new_tokens"], self.log_dir, shown=shown,
                           templated=self.encoder.format == "chat", logger=self.logger, loggers=history.loggers)

    # ------------------------------------------------------------------ the step
    def run_step(self, inputs):
        """Training: ``(None, the batch's loss)``; evaluation: ``({"loss_sum", "tokens"[, "correct"]}, its mean)``
        for :class:`~basetrainer.tasks.text.recorders.TokenLossRecorder`."""
        logits = self.model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits
        labels = inputs["labels"]
        if self.classifier:
            total = F.cross_entropy(logits.float(), labels, reduction="sum")
            count = torch.tensor(labels.numel(), device=labels.device)
            loss = total / count
        else:
            total, count = token_losses(logits, labels)
            loss = self._training_loss(total, count) if self.model.training else total / count.clamp(min=1)
        if self.model.training:
            return None, loss
        outputs = {"loss_sum": total.detach(), "tokens": count}
        if self.classifier:
            outputs["correct"] = (logits.argmax(-1) == labels).sum()
        return outputs, loss

    def _training_loss(self, total, count):
        """The batch's loss over the tokens of its whole step (see :mod:`~basetrainer.tasks.text.losses`)."""
        state = self.state
        _, window = state.accumulation_window(state.batch)
        first = state.batch // state.accumulate_grad_batches * state.accumulate_grad_batches
        tokens = self.window_tokens.of(state.epoch, first, window) if self.window_tokens is not None else None
        return training_loss(total, count, tokens, window)

    # ------------------------------------------------------------------ start-up lines
    def _data_line(self):
        cfg = self.cfg
        kind = f"{len(self.labels)} labels" if self.classifier else \
            f"format {self.encoder.format}{', packed' if cfg.packing else ''}"
        source = data.test_source(cfg)
        tested = f"{self.test_num} test samples from {source}" if source else EVALUATION_OFF
        return (f"data: {self.train_num} train samples from {cfg.train_data}, {tested}, max_seq_len "
                f"{cfg.max_seq_len}, {kind} | "
                f"{self.num_workers} loader workers per process ({self.num_workers_reason})")

    def _model_line(self):
        cfg = self.cfg
        whole = f" and {', '.join(cfg.lora['modules_to_save'])} whole" if cfg.lora["modules_to_save"] else ""
        lora = (f"LoRA r {cfg.lora['r']} alpha {cfg.lora['alpha']:g} on "
                f"{', '.join(sorted(_lora_targets(self.model))) or 'none'}{whole}") if cfg.lora["r"] else \
            "full fine-tuning"
        blocks = ", ".join(self.block_classes) or "none named"
        return (f"model: {cfg.model} ({type(_base_model(self.model)).__name__}, decoder layers {blocks}) | {lora}: "
                f"{self.trainable:,} of {self.total_parameters:,} parameters train "
                f"({100 * self.trainable / max(self.total_parameters, 1):.2f}%) | {cfg.optim_type} lr {cfg.lr:g}")


def _base_model(model):
    inner = unwrap_model(model)
    return inner.get_base_model() if hasattr(inner, "get_base_model") else inner


def _lora_targets(model) -> set:
    inner = unwrap_model(model)
    return {name.rpartition(".")[2] for config in getattr(inner, "peft_config", {}).values()
            for name in (config.target_modules or ())}


def prepare_data(cfg):
    """Writes the tiny Llama-like model to ``data/text/tiny-llama`` when it is the model asked for and missing (once,
    before any process starts: ``--ray`` calls it too)."""
    if cfg.model == DEFAULT_MODEL and not os.path.isdir(DEFAULT_MODEL):
        write_tiny_model(DEFAULT_MODEL, "llama")


def prepare(cfg):
    """Before any process starts: the default model written when missing, then the model and the datasets checked
    (a missing folder or file, a hub name that cannot be had: one line)."""
    prepare_data(cfg)
    check_model_source(cfg.model)
    data.check_source(cfg.train_data, "train_data")
    if data.test_source(cfg):
        data.check_source(data.test_source(cfg), "test_data")


def run(cfg):
    """What every process runs: trains, and writes ``model/model_final/``. A run that stops before its first
    optimizer step, in a work_dir it made itself, removes that work_dir."""
    return run_or_clean_up(TextTrainer, cfg)[1]


def train(cfg):
    """Checks ``cfg``, that its loggers can start, the model and the data, and runs :func:`run` in as many
    processes as ``cfg`` asks for."""
    check_task_config(cfg)
    if starts_rank_0(cfg):  # the loggers write from rank 0 only
        check_loggers(cfg.loggers, cfg)
    prepare(cfg)
    launch_task(run, cfg)


def main(argv=None, prog=None):
    """Command-line entry point: parse, train; a ``BaseTrainerError`` becomes one ``error:`` line and its exit code."""
    task_main(parse_config, train, argv, prog)


__all__ = ["FINAL_FOLDER", "TextTrainer", "main", "prepare", "prepare_data", "run", "train"]
