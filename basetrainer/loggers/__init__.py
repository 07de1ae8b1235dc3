"""Loggers: where LogHistory writes a run (TensorBoard, history.csv/.jsonl, MLflow, W&B), chosen by name.

``loggers: [tensorboard, csv, mlflow, wandb]`` in the config; the default is
``[tensorboard, csv]``. MLflow and W&B need their extras (``pip install
"basetrainer[mlflow]"``, ``"basetrainer[wandb]"``), imported only when asked for.
"""
import os

from ..config import option
from ..errors import ConfigError
from .base import Logger
from .history import HistoryLogger
from .tensorboard import TensorBoardLogger

DEFAULT_LOGGERS = ("tensorboard", "csv")


def build_loggers(names=DEFAULT_LOGGERS, log_dir=".", config=None, *, indicators=()) -> list:
    """The loggers ``names`` ask for, writing to ``log_dir``; a name that is none of
    tensorboard, csv, mlflow and wandb is a one-line error, as is a missing extra.

    From ``config`` (the run's config, a dict or an attribute dict; may be None):
    ``mlflow_tracking_uri`` (else ``MLFLOW_TRACKING_URI``, else a SQLite store in
    ``work_dir``) and ``work_dir`` (where MLflow's local store and W&B's files go; else
    ``log_dir``). ``indicators`` choose and order the columns of history.csv.
    """
    config = config if config is not None else {}
    work_dir = option(config, "work_dir", None) or log_dir
    builders = {
        "tensorboard": lambda: TensorBoardLogger(log_dir),
        "csv": lambda: HistoryLogger(log_dir, indicators),
        "mlflow": lambda: _mlflow(option(config, "mlflow_tracking_uri", None), work_dir),
        "wandb": lambda: _wandb(work_dir),
    }
    unknown = [name for name in names if name not in builders]
    if unknown:
        raise ConfigError(f"loggers: unknown logger {unknown[0]!r}; choose from {', '.join(builders)}")
    return [builders[name]() for name in names]


def _mlflow(tracking_uri, work_dir):
    from .mlflow import MLflowLogger

    return MLflowLogger(tracking_uri, work_dir=os.fspath(work_dir))


def _wandb(work_dir):
    from .wandb import WandbLogger

    return WandbLogger(work_dir=os.fspath(work_dir))


__all__ = ["DEFAULT_LOGGERS", "HistoryLogger", "Logger", "TensorBoardLogger", "build_loggers"]
