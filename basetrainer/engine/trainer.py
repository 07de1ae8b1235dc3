"""EngineTrainer: the training loop.

A user subclass fills in six ``build_*`` hooks and calls ``self.build(cfg)``; ``run()``
then trains. The loop reads top to bottom in ``run`` -> ``train_epoch`` -> ``train_step``
-> ``optimizer_step``, and ``test_epoch``. Where a user would change behaviour:

- a custom forward or loss: override ``run_step`` (it returns ``outputs, losses``);
- a custom batch layout: override ``run_step`` too; batches reach it already on the device;
- observing or steering training (metrics, logging, LR, checkpoints): a ``Callback``.

The loop options (``amp``, ``accumulate_grad_batches``, ``clip_grad_norm``,
``channels_last``, ``compile``, ``nonfinite_loss``) are config keys read in ``__init__``
and applied where they act, in ``train_step`` and ``optimizer_step``.
"""
import contextlib
import glob
import logging
import os
import random
import signal

import numpy as np
import torch

from .. import __version__
from ..callbacks.callbacks import CallbackList
from ..config import to_plain
from ..errors import CheckpointError, ConfigError, DataError, TrainingInterrupted
from . import checkpoint, comm, data, signals
from .batch import batch_size, move_to_device, total_loss
from .loss_tally import LossTally
from .parallel import build_model_parallel, is_ddp, unwrap_model

logger = logging.getLogger("basetrainer")

_AMP_DTYPES = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}
_AMP_ALIASES = {"false": "none", "no": "none", "off": "none", "fp32": "none", "0": "none",
                "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
# Settings that change what the remaining steps do: a resume that changes one is no exact continuation.
_RUN_SETTINGS = ("num_epochs", "lr", "batch_size", "optim_type", "momentum", "weight_decay", "loss_type",
                 "scheduler", "milestones", "num_warn_up", "accumulate_grad_batches", "clip_grad_norm", "amp")


class EngineTrainer:
    """The abstract trainer: subclass it and fill in the ``build_*`` hooks.

    ``__init__`` reads the loop options from ``cfg`` and sets ``device``,
    ``is_main_process``, ``world_size``, ``rank`` and ``local_rank``; ``build(cfg)`` calls
    the hooks in the order train loader, test loader, model, criterion, optimizer,
    callbacks, and fills ``num_steps`` (batches per epoch), ``num_samples``/``train_num``
    and ``test_num``.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        self.num_epochs = int(_option(cfg, "num_epochs", 1))
        self.progress = bool(_option(cfg, "progress", True))
        self.world_size = comm.get_world_size()
        self.rank = comm.get_rank()
        self.local_rank = comm.get_local_rank()
        self.is_main_process = comm.is_main_process()
        self.device = comm.get_device(_option(cfg, "gpu_id", None))
        self.seed = int(_option(cfg, "seed", 2020))
        seed_everything(self.seed)  # the same on every rank: identical initial weights

        self.amp_dtype = _parse_amp(_option(cfg, "amp", "none"), self.device)
        self.accumulate_grad_batches = _positive_int(cfg, "accumulate_grad_batches", 1)
        self.clip_grad_norm = float(_option(cfg, "clip_grad_norm", 0.0))
        self.channels_last = bool(_option(cfg, "channels_last", False))
        self.compile = bool(_option(cfg, "compile", False))
        self.nonfinite_loss = str(_option(cfg, "nonfinite_loss", "raise")).lower()
        if self.nonfinite_loss not in ("raise", "skip", "ignore"):
            raise ConfigError(f"nonfinite_loss: {self.nonfinite_loss!r} is not one of raise, skip, ignore")
        self.nonfinite_check_every = _positive_int(cfg, "nonfinite_check_every", 50)
        # "skip" checks each optimizer step itself; "ignore" checks nothing, as a bare PyTorch loop
        self.loss_tally = LossTally(check=self.nonfinite_loss == "raise")
        self.stop_check_every = _positive_int(cfg, "stop_check_every", 10)

        self.model = self.optimizer = self.criterion = self.scaler = None
        self.train_loader = self.test_loader = None
        self.callbacks = []
        self.num_steps = self.num_samples = self.train_num = self.test_num = 0
        self.epoch = self.start_epoch = self.batch = 0
        self.iteration = 0  # optimizer steps taken since the start of training
        self.skipped_steps = 0
        self.loss = None  # the current batch's total loss, detached
        self.stop_training = False
        self.accumulating = False  # gradients of some batches wait for the next optimizer step
        self.start_batch = 0  # the batch the next epoch starts at (> 0 after a mid-epoch resume)
        self._epoch_done = False
        self._accumulates = self.accumulate_grad_batches > 1
        self._plain_step = self.amp_dtype is None and not self._accumulates
        self._inspects_grads = self.clip_grad_norm > 0 or self.nonfinite_loss == "skip"
        self._pending_rng = self._pending_tally = None
        self._stop_signal = None
        self._watch_stop = self.world_size > 1  # one process looks only once a signal came
        self._ddp = False
        self._events = CallbackList([])

    # ------------------------------------------------------------------ hooks
    def build_train_loader(self, cfg, **kwargs):
        raise NotImplementedError("build_train_loader: return the training DataLoader")

    def build_test_loader(self, cfg, **kwargs):
        raise NotImplementedError("build_test_loader: return the evaluation DataLoader, or None")

    def build_model(self, cfg, **kwargs):
        raise NotImplementedError("build_model: return the model (usually via self.build_model_parallel)")

    def build_criterion(self, cfg, **kwargs):
        raise NotImplementedError("build_criterion: return the loss function")

    def build_optimizer(self, cfg, **kwargs):
        raise NotImplementedError("build_optimizer: return the optimizer")

    def build_callbacks(self, cfg, **kwargs):
        raise NotImplementedError("build_callbacks: return a list of callbacks (may be empty)")

    def build(self, cfg, **kwargs):
        self.train_loader = self.build_train_loader(cfg, **kwargs)
        self.test_loader = self.build_test_loader(cfg, **kwargs)
        if self.train_loader is not None:
            self.num_steps = data.num_batches(self.train_loader)
            self.num_samples = self.train_num = data.num_samples(self.train_loader)
            if self.num_steps == 0 and hasattr(self.train_loader, "__len__"):
                raise DataError("the training loader yields no batch: add data, or lower batch_size")
        if self.test_loader is not None:
            self.test_num = data.num_samples(self.test_loader)
        self.model = self.build_model(cfg, **kwargs)
        if not _on_device(self.model, self.device):
            self.model = self.build_model_parallel(self.model)
        if self.compile:
            self.model.compile()
        self.criterion = self.build_criterion(cfg, **kwargs)
        self.optimizer = self.build_optimizer(cfg, **kwargs)
        self.callbacks = [cb for cb in (self.build_callbacks(cfg, **kwargs) or []) if cb]
        if self.amp_dtype == torch.float16:
            self.scaler = torch.amp.GradScaler(self.device.type)
        self._ddp = is_ddp(self.model)

    def build_dataloader(self, dataset, batch_size, num_workers=0, shuffle=True, phase="train",
                         distributed=True, **kwargs):
        """A DataLoader sharded by global rank (see :func:`basetrainer.engine.data.build_dataloader`)."""
        kwargs.setdefault("seed", self.seed)
        return data.build_dataloader(dataset, batch_size, num_workers, shuffle=shuffle, phase=phase,
                                     distributed=distributed, **kwargs)

    def build_model_parallel(self, model, device_ids=None, distributed=True, **kwargs):
        """Moves the model to this process's device and wraps it in DDP or DataParallel as needed.

        ``distributed`` is kept for old scripts: several processes always mean DDP.
        """
        cfg = self.cfg
        return build_model_parallel(
            model,
            self.device,
            device_ids=_option(cfg, "gpu_id", None) if device_ids is None else device_ids,
            sync_bn=kwargs.get("sync_bn", bool(_option(cfg, "sync_bn", False))),
            find_unused_parameters=kwargs.get("find_unused_parameters",
                                              bool(_option(cfg, "find_unused_parameters", False))),
            broadcast_buffers=kwargs.get("broadcast_buffers", bool(_option(cfg, "broadcast_buffers", True))),
            channels_last=self.channels_last,
        )

    # ------------------------------------------------------------------ the loop
    def run(self, logs=None):
        """Trains from ``start_epoch`` (or the resumed position) to ``num_epochs``; returns ``logs``."""
        logs = {"train": {}, "test": {}, **(logs or {})}
        self._events = events = CallbackList(self.callbacks + self._builtin_callbacks(), trainer=self)
        self.resume_or_seed()
        logs["lr"] = self.optimizer.param_groups[0]["lr"]
        logs["epoch"] = self.start_epoch
        self.stop_training = False
        with signals.handling(self._on_stop_signal):
            try:
                events.on_train_begin(logs)
                for epoch in range(self.start_epoch, self.num_epochs):
                    if self.stop_training:  # set before this epoch, e.g. restored by a resumed EarlyStopping
                        break
                    self.epoch = logs["epoch"] = epoch
                    self._epoch_done = False
                    self._start_loss_tally()
                    events.on_epoch_begin(epoch, logs)
                    self.train_epoch(logs)
                    self.test_epoch(logs)
                    self._epoch_done = True
                    events.on_epoch_end(epoch, logs)
                events.on_train_end(logs)
            except BaseException as error:  # callbacks flush and close, then the error goes on
                events.on_exception(error, logs)
                raise
        return logs

    def train_epoch(self, logs):
        # The handlers of the per-batch events, looked up once: an event no callback uses costs nothing.
        batch_begin, summary, batch_end = self._events.handlers("on_batch_begin", "on_train_summary", "on_batch_end")
        move, param_groups = self._mover(), self.optimizer.param_groups
        self.model.train()
        batches = data.iterate_from(self.train_loader, self.epoch, self.start_batch)
        if self._pending_rng is not None:  # after positioning the loader, so skipped batches don't count
            checkpoint.set_rng_state(self._pending_rng)
            self._pending_rng = None
        for batch, inputs in enumerate(batches, start=self.start_batch):
            self.batch = batch
            for fn in batch_begin:
                fn(batch, logs)
            if move is not None:
                inputs = move(inputs)
            outputs, losses = self.train_step(inputs)
            logs["lr"] = param_groups[0]["lr"]
            for fn in summary:
                fn(inputs, outputs, losses, self.epoch, batch, logs)
            for fn in batch_end:
                fn(batch, logs)
            if self._watch_stop and self._stop_requested(batch):
                self.preempt()
            if self.stop_training:
                break
        self.start_batch = 0
        self.check_losses_finite()

    def train_step(self, inputs):
        """One batch: forward and loss under autocast, backward, and the optimizer step
        at the end of each accumulation window. Returns ``run_step``'s ``(outputs, losses)``."""
        if self._plain_step:  # no AMP, no accumulation: the forward needs no context, every batch steps
            step_now, divisor = True, 1
            outputs, losses = self.run_step(inputs)
        else:
            step_now, divisor = self._accumulation_window(self.batch) if self._accumulates else (True, 1)
            with self._forward_context(step_now):
                outputs, losses = self.run_step(inputs)
            self.accumulating = not step_now
        loss = total_loss(losses)
        self.loss = detached = loss.detach()  # callbacks read this rather than each detaching the loss again
        tally = self.loss_tally  # checked for NaN/inf and summed every nonfinite_check_every batches
        tally.window.append(detached)
        if tally.count_samples:
            tally.sizes.append(batch_size(inputs))
        if divisor > 1:
            loss = loss / divisor
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()
        if step_now:
            self.optimizer_step()
        if len(tally.window) >= self.nonfinite_check_every:
            self.check_losses_finite()
        return outputs, losses

    def run_step(self, inputs):
        """Forward pass and loss for one batch; override for other batch layouts or losses.

        Returns ``(outputs, losses)``; ``losses`` may be a tensor, a list or a dict of
        tensors (their sum is what backward sees; callbacks see each term).
        """
        data_, targets = inputs
        outputs = self.model(data_)
        losses = self.criterion(outputs, targets)
        return outputs, losses

    def optimizer_step(self):
        """Unscale, clip, check, step and clear the gradients; the lr used is published in logs."""
        optimizer, scaler = self.optimizer, self.scaler
        if self._inspects_grads and not self._clip_and_check_gradients():
            return
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        self.iteration += 1

    def _clip_and_check_gradients(self) -> bool:
        """Unscales and clips the gradients (``clip_grad_norm``); under ``nonfinite_loss: skip``,
        drops this step when its losses or gradients are not finite. Returns whether to step."""
        optimizer, scaler = self.optimizer, self.scaler
        if scaler is not None:
            scaler.unscale_(optimizer)
        max_norm = self.clip_grad_norm if self.clip_grad_norm > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        if self.nonfinite_loss != "skip":
            return True
        if self._step_is_finite(grad_norm):
            self.loss_tally.fold()  # this step's losses, known finite
            return True
        self.loss_tally.discard()
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.update()
        self.skipped_steps += 1
        logger.warning("skipped the optimizer step at epoch %d, batch %d: non-finite loss or gradients",
                       self.epoch, self.batch)
        return False

    def test_epoch(self, logs):
        events = self._events
        events.on_test_begin(logs)
        if self.test_loader is not None:
            move = self._mover()
            self.model.eval()
            with torch.no_grad():
                for batch, inputs in enumerate(self.test_loader):
                    if move is not None:
                        inputs = move(inputs)
                    with self._forward_context():
                        outputs, losses = self.run_step(inputs)
                    self.loss = total_loss(losses)
                    events.on_test_summary(inputs, outputs, losses, self.epoch, batch, logs)
        events.on_test_end(logs)

    def evaluate(self, logs=None):
        """Runs only the evaluation loop with the callbacks; returns ``logs["test"]``."""
        logs = {"train": {}, "test": {}, **(logs or {})}
        self._events = CallbackList(self.callbacks, trainer=self)
        self.test_epoch(logs)
        return logs["test"]

    # ------------------------------------------------------------------ loop helpers
    def _accumulation_window(self, batch):
        """(whether ``batch`` ends its accumulation window, that window's size).

        The last window of an epoch may be shorter, and is divided by its own size so
        that every optimizer step averages over the batches it saw.
        """
        n = self.accumulate_grad_batches
        full = (self.num_steps // n) * n if self.num_steps else None
        size = n if full is None or batch < full else self.num_steps - full
        return (batch % n) + 1 == size, size

    def _forward_context(self, step_now=True):
        """Autocast when AMP is on; DDP's no_sync inside an accumulation window (DDP decides at
        forward time whether the next backward all-reduces, so only the forward needs it)."""
        no_sync = not step_now and self._ddp
        stack = contextlib.ExitStack()
        if no_sync:
            stack.enter_context(self.model.no_sync())
        if self.amp_dtype is not None:
            stack.enter_context(torch.autocast(device_type=self.device.type, dtype=self.amp_dtype))
        return stack

    def _mover(self):
        """What moves a batch to the device, or None when it is there already (the CPU)."""
        if self.device.type == "cpu" and not self.channels_last:
            return None
        device, channels_last = self.device, self.channels_last
        return lambda batch: move_to_device(batch, device, channels_last)

    def check_losses_finite(self):
        """Adds the pending losses to the epoch's sums; raises NonFiniteLossError naming the
        first batch whose loss was NaN or infinite (``nonfinite_loss: raise``).

        Losses are checked in windows (every ``nonfinite_check_every`` batches, at every
        epoch end, and before any checkpoint), so that no host sync runs per step.
        """
        self.loss_tally.fold()

    def _start_loss_tally(self):
        """A new epoch's loss sums, or, after a mid-epoch resume, the interrupted epoch's."""
        self.loss_tally.start_epoch(self.epoch, self.start_batch)
        if self._pending_tally is not None and self.start_batch:
            self.loss_tally.load_state_dict(self._pending_tally, self.device)
        self._pending_tally = None

    def _step_is_finite(self, grad_norm) -> bool:
        flag = torch.isfinite(grad_norm.float())
        losses_finite = self.loss_tally.pending_finite()
        if losses_finite is not None:
            flag = flag & losses_finite
        bad = (~flag).to(torch.int32).reshape(1)
        return not bool(comm.all_reduce_max(bad.to(self.device))[0])  # every rank takes the same decision

    def _builtin_callbacks(self):
        if not self.progress:
            return []
        from ..callbacks.progress_bar import ProgressBar

        return [ProgressBar()]

    # ------------------------------------------------------------------ stop signals
    def _on_stop_signal(self, signum, frame):
        """SIGTERM/SIGUSR1 during training ask for a clean stop: save ``last.pth``, exit 75."""
        self._stop_signal = signum
        self._watch_stop = True

    def _stop_requested(self, batch) -> bool:
        """Whether to stop after this batch; all ranks agree, at an optimizer-step boundary."""
        if self.accumulating:
            return False
        if self.world_size == 1:
            return self._stop_signal is not None
        if self.iteration % self.stop_check_every and batch + 1 != self.num_steps:
            return False
        flag = torch.tensor([1 if self._stop_signal is not None else 0], device=self.device)
        return bool(comm.all_reduce_max(flag)[0])

    def preempt(self):
        """Saves ``last.pth`` through the checkpoint callbacks and stops with TrainingInterrupted."""
        self.check_losses_finite()
        saved = [cb.save_last() for cb in self.callbacks if hasattr(cb, "save_last")]
        saved = [p for p in saved if p]
        name = signal.Signals(self._stop_signal).name if self._stop_signal else "a stop request"
        where = f"saved {saved[0]}" if saved else "no ModelCheckpoint callback, nothing saved"
        raise TrainingInterrupted(
            f"stopped by {name} at epoch {self.epoch}, batch {self.batch} ({where}); rerun with resume: auto to continue"
        )

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """The whole training state: enough to continue exactly. Call it on every rank
        (it gathers the ranks' RNG states); only the main process need write it."""
        epoch, batch = (self.epoch + 1, 0) if self._epoch_done else (self.epoch, self.batch + 1)
        state = {
            "basetrainer_version": __version__,
            "epoch": epoch,
            "batch": batch,
            "iteration": self.iteration,
            "world_size": self.world_size,
            "model": checkpoint.model_state_dict(self.model),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "callbacks": {key: cb.state_dict() for key, cb in self._keyed_callbacks() if hasattr(cb, "state_dict")},
            "rng": comm.all_gather(checkpoint.get_rng_state()),
            "loss_tally": self.loss_tally.state_dict(),
            "config": to_plain(self.cfg),
        }
        spec = getattr(unwrap_model(self.model), "pruning_spec", None)
        if spec is not None:
            state["architecture"] = spec
        return state

    def load_state_dict(self, state: dict, name: str = "the checkpoint") -> None:
        for key in ("model", "optimizer", "epoch", "batch"):
            if key not in state:
                raise CheckpointError(f"{name} is not a full training checkpoint (no '{key}'); "
                                      f"use finetune to load weights only")
        model_state = {checkpoint.strip_prefixes(k): v for k, v in state["model"].items()}
        checkpoint.check_shapes(self.model, model_state, name)
        unwrap_model(self.model).load_state_dict(model_state)
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        saved = state.get("callbacks", {})
        for key, cb in self._keyed_callbacks():
            if key in saved and hasattr(cb, "load_state_dict"):
                cb.load_state_dict(saved[key])
            elif hasattr(cb, "load_state_dict") and key not in saved:
                logger.warning("%s holds no state for callback %s; it starts afresh", name, key)
        self.start_epoch, self.start_batch = int(state["epoch"]), int(state["batch"])
        self.iteration = int(state.get("iteration", 0))
        self._warn_changed_settings(state.get("config"), name)
        self._pending_tally = state.get("loss_tally")
        rng = state.get("rng") or []
        if len(rng) == self.world_size:
            self._pending_rng = rng[self.rank]
        else:
            logger.warning("%s was written by %d process(es), this run has %d: random streams are reseeded, "
                           "so the continuation is not bit-exact", name, len(rng), self.world_size)
            seed_everything(self.seed + self.rank + 7919 * self.start_epoch)

    def _warn_changed_settings(self, saved, name):
        """Names the training settings that differ from those ``name`` was written with."""
        if not isinstance(saved, dict) or not self.is_main_process:
            return
        now = to_plain(self.cfg)
        changed = [f"{key} {saved[key]!r} -> {now[key]!r}" for key in _RUN_SETTINGS
                   if key in saved and key in now and saved[key] != now[key]]
        if changed:
            logger.warning("%s was written with other settings (%s): training goes on with the new ones, "
                           "so it does not continue the old run exactly", name, ", ".join(changed))

    def resume_or_seed(self):
        """Loads the checkpoint named by ``cfg.resume`` ("auto": the newest last.pth), else seeds per rank."""
        path = self._resume_path()
        if path is None:
            seed_everything(self.seed + self.rank)  # per-rank streams (dropout, augmentation), from one seed
            return
        self.load_state_dict(checkpoint.load_checkpoint(path), name=path)
        if self.is_main_process:
            logger.info("resumed from %s at epoch %d, batch %d", path, self.start_epoch, self.start_batch)

    def _resume_path(self):
        resume = _option(self.cfg, "resume", None)
        if resume in (None, False, "", "none", "None"):
            return None
        if str(resume).lower() != "auto":
            if not os.path.isfile(str(resume)):
                raise CheckpointError(f"resume: no checkpoint at {resume}; check the path, or use resume: auto")
            return str(resume)
        candidates = [p for cb in self.callbacks for p in [getattr(cb, "last_path", None)] if p]
        work_dir = _option(self.cfg, "work_dir", None)
        if work_dir:
            candidates += glob.glob(os.path.join(str(work_dir), "**", "last.pth"), recursive=True)
        existing = [p for p in set(candidates) if os.path.isfile(p)]
        if not existing:
            if self.is_main_process:
                logger.info("resume: auto found no last.pth; starting from scratch")
            return None
        return max(existing, key=os.path.getmtime)

    def _keyed_callbacks(self):
        return [(f"{i}:{type(cb).__name__}", cb) for i, cb in enumerate(self.callbacks)]

    def loader(self, phase: str):
        """The data loader of ``phase``: "train", or "test" (may be None)."""
        return self.train_loader if phase == "train" else self.test_loader

    def is_sharded(self, phase: str) -> bool:
        """Whether each rank sees different samples in ``phase`` ("train"/"test"): metrics then sum over ranks."""
        return data.is_sharded(self.loader(phase))


def seed_everything(seed: int) -> None:
    """Seeds python, numpy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _option(cfg, key, default):
    value = cfg.get(key, default) if isinstance(cfg, dict) else getattr(cfg, key, default)
    return default if value is None else value


def _positive_int(cfg, key, default) -> int:
    value = _option(cfg, key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key} expects an integer >= 1, got {value!r}")
    return value


def _parse_amp(value, device) -> "torch.dtype | None":
    name = str(value).strip().lower()
    if name == "true":
        name = "fp16" if device.type == "cuda" else "bf16"
    name = _AMP_ALIASES.get(name, name)
    if name not in _AMP_DTYPES:
        raise ConfigError(f"amp: {value!r} is not one of none, bf16, fp16")
    return _AMP_DTYPES[name]


def _on_device(model, device) -> bool:
    param = next(model.parameters(), None) if model is not None else None
    return param is None or param.device == device or (device.type == "cuda" and param.device.type == "cuda")
