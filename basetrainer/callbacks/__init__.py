"""Callbacks: the base class and the stock callbacks (recorders, loggers, checkpoints, EMA).

A trainer returns them from ``build_callbacks``; each finds the trainer, the model and the run's state
itself. Here a linear classifier trains for three epochs with the loss recorded, an average of its
weights evaluated, early stopping on the test loss, checkpoints and the history files::

    >>> import os
    >>> import torch
    >>> from torch.utils.data import TensorDataset
    >>> from basetrainer import EngineTrainer
    >>> from basetrainer.callbacks import (EMA, EarlyStopping, LogHistory, LossesRecorder,
    ...                                    ModelCheckpoint)
    >>> from basetrainer.config import Config
    >>> def data(seed):
    ...     x = torch.randn(64, 4, generator=torch.Generator().manual_seed(seed))
    ...     return TensorDataset(x, (x.sum(dim=1) > 0).long())
    >>> class Linear(EngineTrainer):
    ...     def __init__(self, cfg):
    ...         super().__init__(cfg)
    ...         self.build(cfg)
    ...     def build_train_loader(self, cfg):
    ...         return self.build_dataloader(data(0), batch_size=16)
    ...     def build_test_loader(self, cfg):
    ...         return self.build_dataloader(data(1), batch_size=16, phase="test", shuffle=False)
    ...     def build_model(self, cfg):
    ...         return torch.nn.Linear(4, 2)
    ...     def build_criterion(self, cfg):
    ...         return torch.nn.CrossEntropyLoss()
    ...     def build_optimizer(self, cfg):
    ...         return torch.optim.SGD(self.model.parameters(), lr=0.1)
    ...     def build_callbacks(self, cfg):
    ...         return [LossesRecorder(),  # publishes logs["train"]["loss"] and logs["test"]["loss"]
    ...                 EMA(decay=0.9),  # evaluates (and exports) an average of the weights
    ...                 EarlyStopping("loss", mode="min", patience=2),
    ...                 ModelCheckpoint(model_dir="run/model", indicator="loss", mode="min"),
    ...                 LogHistory("run/log", indicators=["loss"], tensorboard=False, plot=False)]
    >>> logs = Linear(Config(num_epochs=3, progress=False)).run()
    >>> sorted(logs["test"])
    ['loss']
    >>> sorted(os.listdir("run/log")), "model_final.pth" in os.listdir("run/model")
    (['history.csv', 'history.jsonl'], True)
"""
from ..engine.events import HIGH, HIGHEST, LATE, LOW, LOWEST, NORMAL, Callback, CallbackList
from .early_stopping import EarlyStopping
from .ema import EMA
from .log_history import LogHistory
from .losses_recorder import LossesRecorder
from .model_checkpoint import ModelCheckpoint
from .multi_losses_recorder import MultiLossesRecorder

__all__ = ["Callback", "CallbackList", "HIGHEST", "HIGH", "NORMAL", "LATE", "LOW", "LOWEST", "EarlyStopping", "EMA",
           "LogHistory", "LossesRecorder", "ModelCheckpoint", "MultiLossesRecorder"]
