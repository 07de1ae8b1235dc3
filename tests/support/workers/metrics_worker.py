"""A small classifier trainer for the metrics and logging tests, and their 2-process job.

In-process tests import ``ClassifierTrainer`` and ``cfg``. Run as a script, it trains on 2
gloo processes with the stock recorders and LogHistory writing to OUT_DIR, each rank
asking for its own log file ``train_rank<r>.log``, and rank 0 saves the final weights to
``OUT_DIR/final.pt``::

    python tests/workers/metrics_worker.py OUT_DIR
"""
import os
import sys

import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

from basetrainer.engine.trainer import EngineTrainer

CLASSES = ["cat", "dog", "bird"]


def blobs(n, seed, features=8):
    """``n`` samples of 3 overlapping Gaussian blobs: a model gets most, not all, of them right."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, len(CLASSES), (n,), generator=g)
    x = torch.randn(n, features, generator=g) + 1.5 * nn.functional.one_hot(y, features).float()
    return TensorDataset(x, y)


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, len(CLASSES)))


class ClassifierTrainer(EngineTrainer):
    """cfg keys beyond the trainer's: train_size, test_size (0: no test loader), batch_size,
    callbacks (a function returning the list, so that a resumed run gets fresh ones)."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.build(cfg)

    def build_train_loader(self, cfg):
        return self.build_dataloader(blobs(cfg.get("train_size", 96), seed=0), cfg.get("batch_size", 16), 0)

    def build_test_loader(self, cfg):
        if not cfg.get("test_size", 50):
            return None
        return self.build_dataloader(blobs(cfg.get("test_size", 50), seed=1), 16, 0, phase="test", shuffle=False)

    def build_model(self, cfg):
        return self.build_model_parallel(make_model())

    def build_criterion(self, cfg):
        return nn.CrossEntropyLoss()

    def build_optimizer(self, cfg):
        return torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)

    def build_callbacks(self, cfg):
        return cfg["callbacks"]() if callable(cfg.get("callbacks")) else list(cfg.get("callbacks", []))


def cfg(**overrides):
    base = {"num_epochs": 2, "gpu_id": None, "progress": False, "seed": 5}
    base.update(overrides)
    return base


def main(out_dir):
    from basetrainer.callbacks.log_history import LogHistory
    from basetrainer.callbacks.losses_recorder import LossesRecorder
    from basetrainer.checkpoint import model_state_dict
    from basetrainer.metric.accuracy_recorder import AccuracyRecorder
    from basetrainer.utils.log import set_logger

    def callbacks():
        return [LossesRecorder(), AccuracyRecorder(target_names=CLASSES, topk=(1, 2), log_dir=out_dir),
                LogHistory(out_dir, log_freq=2, indicators=["loss", "Acc"])]

    trainer = ClassifierTrainer(cfg(test_size=101, batch_size=8, callbacks=callbacks))
    set_logger("info", os.path.join(out_dir, f"train_rank{trainer.rank}.log"), trainer.is_main_process)
    trainer.run()
    if trainer.is_main_process:
        torch.save(model_state_dict(trainer.model), os.path.join(out_dir, "final.pt"))


if __name__ == "__main__":
    from basetrainer.distributed.launch import launch

    launch(main, 2, args=(sys.argv[1],))
