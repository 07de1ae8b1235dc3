"""Loggers: where LogHistory writes a run (TensorBoard, history.csv/.jsonl, MLflow, W&B), chosen by name.

``loggers: [tensorboard, csv, mlflow, wandb]`` in the config; the default is
``[tensorboard, csv]``. MLflow and W&B need their extras (``pip install
"basetrainer[mlflow]"``, ``"basetrainer[wandb]"``), imported only when asked for.
:func:`check_loggers` refuses, before any work, what would stop a tracker at its start.
"""
import os

from ..config import option
from ..errors import ConfigError
from .base import Logger, require
from .history import HistoryLogger
from .mlflow import check_store
from .tensorboard import TensorBoardLogger
from .wandb import check_login

DEFAULT_LOGGERS = ("tensorboard", "csv")
LOGGER_NAMES = ("tensorboard", "csv", "mlflow", "wandb")


def build_loggers(names=DEFAULT_LOGGERS, log_dir=".", config=None, *, indicators=()) -> list:
    """The loggers ``names`` ask for, writing to ``log_dir``; a name that is none of
    tensorboard, csv, mlflow and wandb is a one-line error, as is a missing extra.

    From ``config`` (the run's config, a dict or an attribute dict; may be None):
    ``mlflow_tracking_uri`` (else ``MLFLOW_TRACKING_URI``, else a SQLite store in
    ``work_dir``), ``wandb_mode`` (online, offline or disabled; else W&B's own choice) and
    ``work_dir`` (where MLflow's local store and W&B's files go; else ``log_dir``).
    ``indicators`` choose and order the columns of history.csv.
    """
    config = config if config is not None else {}
    work_dir = option(config, "work_dir", None) or log_dir
    builders = {
        "tensorboard": lambda: TensorBoardLogger(log_dir),
        "csv": lambda: HistoryLogger(log_dir, indicators),
        "mlflow": lambda: _mlflow(option(config, "mlflow_tracking_uri", None), work_dir),
        "wandb": lambda: _wandb(work_dir, option(config, "wandb_mode", None)),
    }
    _check_names(names)
    return [builders[name]() for name in names]


def check_loggers(names=DEFAULT_LOGGERS, config=None) -> None:
    """Refuses, in one line, loggers that could not start: an unknown name, a missing extra, W&B
    without a login for an online run (``wandb_mode``), an MLflow store that cannot be reached or
    written (``mlflow_tracking_uri``). ``config`` as for :func:`build_loggers`. It makes nothing:
    call it before any work, in the process that will log (rank 0)."""
    config = config if config is not None else {}
    _check_names(names)
    if "mlflow" in names:
        require("mlflow", "mlflow")
        check_store(option(config, "mlflow_tracking_uri", None), option(config, "work_dir", None) or ".")
    if "wandb" in names:
        require("wandb", "wandb")
        check_login(option(config, "wandb_mode", None))


def _check_names(names) -> None:
    unknown = [name for name in names if name not in LOGGER_NAMES]
    if unknown:
        raise ConfigError(f"loggers: unknown logger {unknown[0]!r}; choose from {', '.join(LOGGER_NAMES)}")


def _mlflow(tracking_uri, work_dir):
    from .mlflow import MLflowLogger

    return MLflowLogger(tracking_uri, work_dir=os.fspath(work_dir))


def _wandb(work_dir, mode):
    from .wandb import WandbLogger

    return WandbLogger(work_dir=os.fspath(work_dir), mode=mode)


__all__ = ["DEFAULT_LOGGERS", "LOGGER_NAMES", "HistoryLogger", "Logger", "TensorBoardLogger", "build_loggers",
           "check_loggers"]
