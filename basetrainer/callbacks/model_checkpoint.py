"""Checkpoints: ``last.pth`` to resume from, the best ``k`` models, and the final weights."""
import logging
import os
import time

import torch

from ..engine import checkpoint, comm
from ..engine.parallel import unwrap_model
from .callbacks import LOWEST, Callback


class ModelCheckpoint(Callback):
    """Saves the training state and the best models to ``model_dir``.

    - ``last.pth``: the full training state (see ``EngineTrainer.state_dict``) at every
      epoch end, and also every ``every_n_iters`` optimizer steps and/or every
      ``every_n_minutes`` minutes, for pre-emptible machines;
    - ``best_model_<epoch>_<value>.pth``: the ``save_best_k`` best models by
      ``logs["test"][indicator]`` (higher is better, or lower with ``inverse=True`` /
      ``mode="min"``), from epoch ``start_save`` on;
    - ``model_final.pth``: a plain state_dict of the final model, for inference.

    Every file is written atomically by the main process while the other ranks wait, and
    weights are stored without ``module.`` prefixes whatever wraps the model. ``moder_dir``
    is the old spelling of ``model_dir``; ``model`` and ``optimizer`` are only needed when
    the callback is used without a trainer.
    """

    priority = LOWEST

    def __init__(self, model=None, optimizer=None, moder_dir=None, epochs=None, start_save=-1, indicator="",
                 inverse=False, logger=None, *, model_dir=None, mode=None, save_best_k=1, every_n_iters=0,
                 every_n_minutes=0.0, save_final=True):
        super().__init__()
        model_dir = model_dir or moder_dir
        if not model_dir:
            raise ValueError("ModelCheckpoint needs model_dir (or its old spelling, moder_dir)")
        self.model, self.optimizer = model, optimizer
        self.model_dir = str(model_dir)
        self.epochs = epochs
        self.start_save = start_save
        self.indicator = indicator
        self.lower_is_better = (mode == "min") if mode is not None else bool(inverse)
        self.save_best_k = save_best_k
        self.every_n_iters = int(every_n_iters or 0)
        self.every_n_minutes = float(every_n_minutes or 0.0)
        self.save_final = save_final
        self.logger = logger or logging.getLogger("basetrainer")
        self.best = []  # [(value, epoch, path)], best first
        self._last_save_time = time.monotonic()
        self._last_saved_iteration = -1
        self._warned_missing = False

    @property
    def last_path(self) -> str:
        return os.path.join(self.model_dir, "last.pth")

    # ------------------------------------------------------------------ events
    def on_train_begin(self, logs):
        self._last_save_time = time.monotonic()

    def handles(self, event):
        if event == "on_batch_end":  # only interval saving works per batch
            return bool(self.every_n_iters or self.every_n_minutes)
        return super().handles(event)

    def on_batch_end(self, batch, logs):
        trainer = self.trainer
        if trainer is None or trainer.accumulating:
            return
        if trainer.iteration != self._last_saved_iteration and self._iteration_save_due(trainer):
            self.save_last()
            self._last_saved_iteration = trainer.iteration

    def on_epoch_end(self, epoch, logs):
        self.save_last()
        value = logs.get("test", {}).get(self.indicator) if self.indicator else None
        if self.indicator and value is None:
            if not self._warned_missing:
                self.logger.warning("ModelCheckpoint: logs['test'] has no %r, so no best model is kept; "
                                    "add the recorder that computes it", self.indicator)
                self._warned_missing = True
            return
        if value is not None and epoch >= self.start_save and self._is_among_best(value):
            self._save_best(epoch, float(value))

    def on_train_end(self, logs):
        if self.save_final:
            self._write(self._weights(), os.path.join(self.model_dir, "model_final.pth"))

    # ------------------------------------------------------------------ saving
    def save_last(self):
        """Writes ``last.pth`` now (every rank must call this); returns its path."""
        trainer = self.trainer
        if trainer is not None:
            trainer.check_losses_finite()  # never replace a good checkpoint by NaN weights
            state = trainer.state_dict()
        else:
            state = {"model": checkpoint.model_state_dict(self.model),
                     "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None}
        self._write(state, self.last_path)
        self._last_save_time = time.monotonic()
        return self.last_path

    def _save_best(self, epoch, value):
        path = os.path.join(self.model_dir, f"best_model_{epoch:03d}_{value:.4f}.pth")
        self._write({"model": self._weights(), "epoch": epoch, self.indicator: value,
                     **self._architecture()}, path)
        self.best.append((value, epoch, path))
        self.best.sort(key=lambda item: item[0], reverse=not self.lower_is_better)
        for _, _, stale in self.best[self.save_best_k:]:
            if comm.is_main_process() and os.path.exists(stale) and stale != path:
                os.remove(stale)
        self.best = self.best[: self.save_best_k]
        self.logger.info("saved best model %s (%s=%.4f)", path, self.indicator, value)

    def _is_among_best(self, value) -> bool:
        if len(self.best) < self.save_best_k:
            return True
        worst = self.best[-1][0]
        return value < worst if self.lower_is_better else value > worst

    def _weights(self) -> dict:
        """The weights to ship: an EMA callback's averaged weights if there is one, else the model's."""
        trainer = self.trainer
        if trainer is not None:
            for cb in trainer.callbacks:
                if hasattr(cb, "weights_for_export"):
                    return cb.weights_for_export()
        model = trainer.model if trainer is not None else self.model
        return checkpoint.model_state_dict(model)

    def _architecture(self) -> dict:
        trainer = self.trainer
        model = trainer.model if trainer is not None else self.model
        spec = getattr(unwrap_model(model), "pruning_spec", None)
        return {"architecture": spec} if spec is not None else {}

    def _write(self, obj, path):
        if comm.is_main_process():
            checkpoint.save_checkpoint(obj, path)
        comm.synchronize()

    def _iteration_save_due(self, trainer) -> bool:
        due = bool(self.every_n_iters) and trainer.iteration > 0 and trainer.iteration % self.every_n_iters == 0
        if self.every_n_minutes:
            elapsed_due = time.monotonic() - self._last_save_time >= 60.0 * self.every_n_minutes
            if comm.get_world_size() > 1:
                # Clocks differ between ranks: agree on the main process's decision, sparingly.
                if trainer.iteration % trainer.stop_check_every == 0:
                    flag = torch.tensor([int(elapsed_due)], device=trainer.device)
                    elapsed_due = bool(comm.all_reduce_max(flag)[0])
                else:
                    elapsed_due = False
            due = due or elapsed_due
        return due

    # ------------------------------------------------------------------ state
    def state_dict(self):
        return {"best": [[value, epoch, path] for value, epoch, path in self.best]}

    def load_state_dict(self, state):
        self.best = [tuple(item) for item in state.get("best", [])]
