"""Checkpoints: ``last.pth`` to resume from, the best ``k`` models, and the final weights."""
import os
import time

import torch

from ..checkpoint import files as checkpoint_files
from ..checkpoint.weights import model_state_dict
from ..distributed import comm
from ..engine.events import LOWEST, Callback
from ..parallel import unwrap_model
from ..utils.file_utils import TEMPORARY_SUFFIX
from ..utils.log import get_logger
from ..utils.published import lookup
from .legacy_checkpoint_files import EarlierCheckpointFiles, warn_unused_keywords
from .monitor import improves

BEST_PREFIX = "best_model_"


class ModelCheckpoint(Callback):
    """Saves the training state and the best models to ``model_dir``.

    - ``last.pth``: the full training state (see ``EngineTrainer.state_dict``) at every
      epoch end, and also every ``every_n_iters`` optimizer steps and/or every
      ``every_n_minutes`` minutes, for pre-emptible machines; a stop signal saves it too,
      and ``resume: auto`` looks for it first;
    - ``best_model_<epoch>_<value>.pth`` (``best_model_step<step>_<value>.pth`` with
      ``eval_every_n_iters``): the ``save_best_k`` best models by ``logs["test"][indicator]``
      (``"val/Acc"`` names one of several test sets; higher is better, or lower with
      ``inverse=True`` / ``mode="min"``), chosen after each evaluation from epoch
      ``start_save`` on (epochs counted from 1 in file names);
    - ``model_final.pth``: a plain state_dict of the final model, for inference.

    At the start of training the main process removes what a run killed mid-save left in
    ``model_dir`` (temporary files) and, when resuming, best models of this run (written since
    it first started) that the restored state does not count among the best ``k`` (saved after
    the checkpoint it resumes from); another run's best models in the folder are left as they are.
    The best models a checkpoint names are read as files of this callback's ``model_dir``, and
    count among the best ``k`` even where the file is missing: a replica group that took another's
    state keeps its own files, lacks those saved while it was away, and keeps no model the others
    do not count as best.

    Every file is written atomically by the main process while the other ranks wait, and
    weights are stored without ``module.`` prefixes whatever wraps the model. The best and
    final models hold the trainer's export weights (an EMA's average when there is one).
    ``model`` and ``optimizer`` are only needed when the callback is used without a trainer.

    Constructed as the earlier library's was, with the folder under its old spelling
    (``ModelCheckpoint(model, optimizer, moder_dir, epochs, start_save, best_save=...,
    model_nums=...)``), it writes the earlier library's files instead of the best models, with
    their meanings of ``start_save``, ``best_save`` and ``model_nums`` (see
    :mod:`~basetrainer.callbacks.legacy_checkpoint_files`), beside ``last.pth`` and ``model_final.pth``.
    """

    priority = LOWEST

    def __init__(self, model=None, optimizer=None, moder_dir=None, epochs=None, start_save=-1, indicator="",
                 inverse=False, logger=None, *, model_dir=None, mode=None, save_best_k=1, every_n_iters=0,
                 every_n_minutes=0.0, save_final=True, best_save=None, model_nums=None):
        super().__init__()
        earlier_way = bool(moder_dir) and not model_dir
        model_dir = model_dir or moder_dir
        if not model_dir:
            raise ValueError("ModelCheckpoint needs model_dir (or its old spelling, moder_dir)")
        self.model, self.optimizer = model, optimizer
        self.model_dir = str(model_dir)
        self.epochs = epochs
        self.start_save = start_save
        self.indicator = indicator
        self.mode = mode if mode is not None else ("min" if inverse else "max")
        self.save_best_k = save_best_k
        self.every_n_iters = int(every_n_iters or 0)
        self.every_n_minutes = float(every_n_minutes or 0.0)
        self.save_final = save_final
        self.logger = logger or get_logger()
        self.best = []  # [(value, epoch, path)], best first
        self._last_save_time = time.monotonic()
        self._last_saved_step = -1
        self._warned_missing = False
        self._restored = False
        self._run_started = None  # when this run first started (time.time()): the files since are its own
        self._evaluated = False  # whether evaluations fire on_evaluation_end (then the best is chosen there)
        self.earlier_files = None
        if earlier_way:
            self.earlier_files = EarlierCheckpointFiles(self.model_dir, epochs, start_save, best_save, model_nums,
                                                        indicator, self.mode, self.logger)
        warn_unused_keywords(earlier_way, save_best_k, best_save, model_nums, self.logger)

    @property
    def last_path(self) -> str:
        return os.path.join(self.model_dir, "last.pth")

    def attach(self, trainer) -> None:
        super().attach(trainer)
        if trainer is not None:
            trainer.set_checkpoint_path(self.last_path)

    # ------------------------------------------------------------------ events
    def publishes(self):
        return ()  # reads the evaluation, publishes nothing in it

    def handles(self, event):
        if event == "on_batch_end":  # only interval saving works per batch
            return bool(self.every_n_iters or self.every_n_minutes)
        return super().handles(event)

    def on_train_begin(self, logs=None):
        self._last_save_time = time.monotonic()
        if self._run_started is None:  # a run started afresh; a resumed one keeps its first start
            self._run_started = time.time()
        if comm.is_main_process() and os.path.isdir(self.model_dir):
            self._remove_leftovers()
        if self.earlier_files is not None and self._restored and self.state is not None:
            self.earlier_files.remove_files_from(self.state.start_epoch)

    def on_batch_end(self, batch, logs=None):
        state = self.state
        if state is None or state.accumulating or state.global_step == self._last_saved_step:
            return
        if self._interval_save_due(state.global_step):
            self.save_last()
            self._last_saved_step = state.global_step

    def on_evaluation_end(self, logs=None):
        self._evaluated = True
        if self.earlier_files is not None:  # the earlier library chose its best model at epoch ends
            return
        state = self.state
        if self.trainer is not None and self.trainer.options.eval_every_n_iters:
            self._keep_if_best(logs, state.epoch, f"step{state.global_step:07d}")
        else:
            self._keep_if_best(logs, state.epoch, f"{state.epoch + 1:03d}")

    def on_epoch_end(self, epoch, logs=None):
        if self.earlier_files is not None:
            # Before last.pth, so that the state it saves knows the best model just written.
            self.earlier_files.save(epoch, logs, self._weights, self._training_weights, self._optimizer_state)
            self.save_last()
            return
        self.save_last()
        if not self._evaluated:  # driven by a loop that fires no on_evaluation_end (earlier libraries')
            self._keep_if_best(logs, epoch, f"{epoch + 1:03d}")

    def _keep_if_best(self, logs, epoch, when):
        """Saves the model as ``best_model_<when>_<value>.pth`` if its test value is among the best ``k``."""
        value = lookup((logs or {}).get("test", {}), self.indicator) if self.indicator else None
        if self.indicator and value is None:
            if not self._warned_missing and (logs or {}).get("test"):  # no test values at all: evaluation is off
                self.logger.warning("ModelCheckpoint: logs['test'] has no %r, so no best model is kept; "
                                    "add the recorder that computes it", self.indicator)
                self._warned_missing = True
            return
        if value is not None and epoch >= self.start_save and self._is_among_best(value):
            self._save_best(epoch, value, when)

    def on_train_end(self, logs=None):
        if self.save_final:
            self._write(self._weights(), os.path.join(self.model_dir, "model_final.pth"))

    # ------------------------------------------------------------------ saving
    def save_last(self):
        """Writes ``last.pth`` now (every rank must call this); returns its path."""
        if self.trainer is not None:
            self.trainer.save_checkpoint(self.last_path)
        else:
            self._write({"model": model_state_dict(self.model),
                         "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None},
                        self.last_path)
        self._last_save_time = time.monotonic()
        return self.last_path

    def _save_best(self, epoch, value, when):
        path = os.path.join(self.model_dir, f"{BEST_PREFIX}{when}_{value:.4f}.pth")
        self._write({"model": self._weights(), "epoch": epoch + 1, self.indicator: value,
                     **self._architecture()}, path)
        self.best.append((value, epoch, path))
        self.best.sort(key=lambda item: item[0], reverse=self.mode == "max")
        for _, _, stale in self.best[self.save_best_k:]:
            if comm.is_main_process() and os.path.exists(stale) and stale != path:
                os.remove(stale)
        self.best = self.best[: self.save_best_k]
        self.logger.info("saved best model %s (%s=%.4f)", path, self.indicator, value)

    def _remove_leftovers(self):
        kept = {os.path.abspath(path) for _, _, path in self.best}
        for name in os.listdir(self.model_dir):
            path = os.path.join(self.model_dir, name)
            cut_short = name.startswith(".") and name.endswith(TEMPORARY_SUFFIX)
            not_best = (self._restored and self.earlier_files is None and name.startswith(BEST_PREFIX)
                        and os.path.abspath(path) not in kept and os.path.getmtime(path) >= self._run_started)
            if cut_short or not_best:
                self.logger.info("removing %s, left by an interrupted run", path)
                os.remove(path)

    def _is_among_best(self, value) -> bool:
        if self.save_best_k == 0:  # no best model kept
            return False
        if len(self.best) < self.save_best_k:
            return True
        return improves(value, self.best[-1][0], self.mode)

    def _weights(self) -> dict:
        if self.trainer is not None:
            return self.trainer.export_weights()
        return model_state_dict(self.model)

    def _training_weights(self) -> dict:
        return model_state_dict(self.trainer.model if self.trainer is not None else self.model)

    def _optimizer_state(self):
        """The optimizer's state as one dict, or None where there is none (FSDP shards it)."""
        strategy = getattr(self.trainer, "strategy", None)
        optimizer = self.trainer.optimizer if self.trainer is not None else self.optimizer
        if optimizer is None or getattr(strategy, "sharded_checkpoint", False):
            return None
        return optimizer.state_dict()

    def _architecture(self) -> dict:
        spec = getattr(unwrap_model(self.model), "pruning_spec", None)
        return {"architecture": spec} if spec is not None else {}

    def _write(self, obj, path):
        if comm.is_main_process():
            checkpoint_files.save_checkpoint(obj, path)
        comm.synchronize()

    def _interval_save_due(self, step) -> bool:
        due = bool(self.every_n_iters) and step > 0 and step % self.every_n_iters == 0
        if self.every_n_minutes:
            elapsed_due = time.monotonic() - self._last_save_time >= 60.0 * self.every_n_minutes
            if comm.get_world_size() > 1:
                # Clocks differ between ranks: agree on the main process's decision, sparingly.
                trainer = self.trainer
                if step % trainer.options.stop_check_every == 0:
                    flag = torch.tensor([int(elapsed_due)], device=trainer.device)
                    elapsed_due = bool(comm.all_reduce_max(flag)[0])
                else:
                    elapsed_due = False
            due = due or elapsed_due
        return due

    # ------------------------------------------------------------------ state
    def state_dict(self):
        state = {"best": [[value, epoch, path] for value, epoch, path in self.best], "run_started": self._run_started}
        if self.earlier_files is not None:
            state["earlier_files"] = self.earlier_files.state_dict()
        return state

    def load_state_dict(self, state):
        self.best = [(value, epoch, os.path.join(self.model_dir, os.path.basename(path)))
                     for value, epoch, path in state.get("best", [])]
        self._run_started = state.get("run_started", 0.0)  # a checkpoint from before: every best model its run's
        if self.earlier_files is not None:
            self.earlier_files.load_state_dict(state.get("earlier_files", {}))
        self._restored = True
