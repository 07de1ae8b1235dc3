"""The "basetrainer" logger: console and file on the main process, warnings and errors only elsewhere.

Only the "basetrainer" logger is configured (it does not propagate), so the root logger
and other libraries' loggers are left as they were.
"""
import logging
import os
import sys

import torch.distributed as dist
from tqdm import tqdm

from ..errors import ConfigError

LOGGER_NAME = "basetrainer"
# ``logger.info(..., extra=RESULT)`` marks a line as a result of the run (an epoch's summary, a
# final report): the console shows results on stdout, the rest on stderr.
RESULT = {"result": True}
_FORMAT = "%(asctime)s %(levelname)s %(message)s"
_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"


def set_logger(level="debug", logfile=None, is_main_process=True) -> logging.Logger:
    """Configures and returns the "basetrainer" logger.

    On the main process (``is_main_process`` and rank 0): messages from ``level`` up go to
    the console and, when ``logfile`` is given, are appended to it (its folder is created).
    On the other ranks: warnings and errors only, to the console, tagged with the rank,
    and no file. Calling it again replaces the handlers it added before, never duplicates them.
    """
    logger = logging.getLogger(LOGGER_NAME)
    logger.propagate = False
    for handler in [h for h in logger.handlers if getattr(h, "_basetrainer", False)]:
        logger.removeHandler(handler)
        handler.close()

    rank = _rank()
    main = bool(is_main_process) and rank == 0
    logger.setLevel(_as_level(level) if main else logging.WARNING)
    prefix = "" if main else f"[rank {rank}] "
    formatter = logging.Formatter(prefix + _FORMAT, _DATE_FORMAT)
    handlers = [_ConsoleHandler()]
    if main and logfile:
        handlers.append(_LazyFileHandler(logfile))
    for handler in handlers:
        handler.setFormatter(formatter)
        handler._basetrainer = True
        logger.addHandler(handler)
    return logger


def get_logger() -> logging.Logger:
    """The "basetrainer" logger (configured by :func:`set_logger`): every module logs through it."""
    return logging.getLogger(LOGGER_NAME)


def _rank() -> int:
    # torch.distributed directly: this module sits below the engine and imports nothing of it.
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class _LazyFileHandler(logging.FileHandler):
    """Appends to a log file that, with its folder, is created when the first line is written:
    a run that stops at its first checks (a config typo, missing data) leaves nothing behind."""

    def __init__(self, path):
        super().__init__(path, mode="a", encoding="utf-8", delay=True)

    def _open(self):
        os.makedirs(os.path.dirname(self.baseFilename), exist_ok=True)
        return super()._open()


class _ConsoleHandler(logging.StreamHandler):
    """Writes results (lines logged with ``extra=RESULT``) to stdout and everything else, the
    progress lines and warnings, to stderr; through ``tqdm.write``, so that a line logged
    mid-epoch does not break the progress bar."""

    def emit(self, record):
        try:
            stream = sys.stdout if getattr(record, "result", False) else self.stream
            tqdm.write(self.format(record), file=stream)
        except Exception:
            self.handleError(record)


def _as_level(level) -> int:
    if isinstance(level, int):
        return level
    value = logging.getLevelName(str(level).upper())
    if not isinstance(value, int):
        raise ConfigError(f"set_logger: unknown level {level!r}; use debug, info, warning or error")
    return value
