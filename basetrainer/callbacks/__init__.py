"""Callbacks: the base class and the stock callbacks (recorders, loggers, checkpoints, EMA)."""
from ..engine.events import HIGH, HIGHEST, LATE, LOW, LOWEST, NORMAL, Callback, CallbackList
from .early_stopping import EarlyStopping
from .ema import EMA
from .log_history import LogHistory
from .losses_recorder import LossesRecorder
from .model_checkpoint import ModelCheckpoint
from .multi_losses_recorder import MultiLossesRecorder

__all__ = ["Callback", "CallbackList", "HIGHEST", "HIGH", "NORMAL", "LATE", "LOW", "LOWEST", "EarlyStopping", "EMA",
           "LogHistory", "LossesRecorder", "ModelCheckpoint", "MultiLossesRecorder"]
