"""The "basetrainer" logger: console and file on the main process, warnings and errors only elsewhere.

Only the "basetrainer" logger is configured (it does not propagate), so the root logger
and other libraries' loggers are left as they were.
"""
import logging
import os
import sys
import warnings

import torch.distributed as dist
from tqdm import tqdm

from ..errors import ConfigError
from . import console
from .arguments import as_keywords
from .console import REPLICA_GROUP_VARIABLE
from .log_files import log_file_handler

LOGGER_NAME = "basetrainer"
# ``logger.info(..., extra=RESULT)`` marks a line as a result of the run (an epoch's summary, a
# final report): the console shows results on stdout, the rest on stderr.
RESULT = {"result": True}
_FORMAT = "%(asctime)s %(levelname)s %(message)s"
_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
#: The earlier library's line layouts, by the names its set_logger took as ``format``.
LINE_FORMATS = {
    "simple": "%(asctime)s|%(levelname)-7s| %(message)s",
    "name": "%(asctime)s|%(levelname)-7s|%(name)s %(lineno)d| %(message)s",
    "module": "%(asctime)s|%(levelname)-7s|%(module)s %(lineno)d| %(message)s",
    "function": "%(asctime)s|%(levelname)-7s|%(module)s.%(funcName)s %(lineno)d| %(message)s",
    "precise": "%(asctime)s.%(msecs)03d|%(levelname)-7s|%(module)s.%(funcName)s %(lineno)d| %(message)s",
    "all": "%(asctime)s|%(levelname)-7s|%(name)s.%(module)s.%(funcName)s %(lineno)d| %(message)s",
    True: "%(asctime)s %(filename)s %(funcName)s %(levelname)s: %(message)s",
    False: "%(levelname)s: %(message)s",
}
_LEVEL_NAMES = {"debug", "info", "warning", "warn", "error", "critical", "fatal"}
_NAME_FIRST = ("name", "level", "logfile", "format", "is_main_process", "rotation", "retention")
_LEVEL_FIRST = ("level", "logfile", "is_main_process")


def set_logger(*args, **kwargs) -> logging.Logger:
    """Configures and returns the "basetrainer" logger: ``set_logger(name=None, level="debug",
    logfile=None, format=None, is_main_process=True, rotation=None, retention=None)``.

    On the main process (``is_main_process`` and rank 0): messages from ``level`` up go to
    the console and, when ``logfile`` is given, are appended to it (its folder is created).
    On the other ranks: warnings and errors only, to the console, tagged with the rank,
    and no file. In a replica group (:mod:`basetrainer.fault_tolerance`) every line is tagged with the group, and
    but for group 0's the console shows warnings only: the file holds the group's whole log. The console is
    :func:`basetrainer.utils.console.stream`. Calling it again replaces the handlers it added before, never
    duplicates them.

    The earlier library's keywords: ``format`` is a line layout, one of :data:`~basetrainer.utils.log.LINE_FORMATS`
    (``True``/``False``: its first versions' long and short lines) or a ``logging`` format
    string; ``rotation`` and ``retention`` rotate and prune the log file (see
    :mod:`basetrainer.utils.log_files`); ``name`` has no effect, as there (basetrainer logs
    through the one "basetrainer" logger). Positional arguments are read in the earlier
    library's order, ``(name, level, logfile, format, is_main_process, rotation, retention)``,
    unless the first one names a level: then in the order of basetrainer's earlier releases,
    ``(level, logfile, is_main_process)``.
    """
    order = _LEVEL_FIRST if args and _names_a_level(args[0]) else _NAME_FIRST
    return _configure(**as_keywords("set_logger", order, args, kwargs))


def _configure(name=None, level="debug", logfile=None, format=None, is_main_process=True, rotation=None,
               retention=None) -> logging.Logger:
    if name is not None:
        warnings.warn(f"set_logger(name={name!r}) has no effect: basetrainer logs through the one 'basetrainer' "
                      f"logger", DeprecationWarning, stacklevel=3)
    logger = logging.getLogger(LOGGER_NAME)
    logger.propagate = False
    for handler in [h for h in logger.handlers if getattr(h, "_basetrainer", False)]:
        logger.removeHandler(handler)
        handler.close()

    rank, group = _rank(), os.environ.get(REPLICA_GROUP_VARIABLE, "")
    main = bool(is_main_process) and rank == 0
    logger.setLevel(_as_level(level) if main else logging.WARNING)
    prefix = ("" if main else f"[rank {rank}] ") + console.tag()
    formatter = logging.Formatter(prefix + _line_format(format), _DATE_FORMAT)
    handlers = [_ConsoleHandler()]
    if group not in ("", "0"):  # its log file holds everything; the console, which group 0 fills, its warnings
        handlers[0].setLevel(logging.WARNING)
    if main and logfile:
        handlers.append(log_file_handler(logfile, rotation, retention))
    for handler in handlers:
        handler.setFormatter(formatter)
        handler._basetrainer = True
        logger.addHandler(handler)
    return logger


def keep_warnings_on_the_console() -> None:
    """Where :func:`set_logger` was never called, has the logger show warnings and errors on the console, as
    Python's last-resort handler did on stderr before stderr went to a replica group's log file
    (:func:`basetrainer.utils.console.keep_apart`)."""
    if not any(getattr(handler, "_basetrainer", False) for handler in get_logger().handlers):
        set_logger(level="warning")


def get_logger() -> logging.Logger:
    """The "basetrainer" logger (configured by :func:`set_logger`): every module logs through it."""
    return logging.getLogger(LOGGER_NAME)


def _rank() -> int:
    # torch.distributed directly: this module sits below the engine and imports nothing of it.
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class _ConsoleHandler(logging.StreamHandler):
    """Writes results (lines logged with ``extra=RESULT``) to stdout and everything else, the
    progress lines and warnings, to the console (stderr); through ``tqdm.write``, so that a line
    logged mid-epoch does not break the progress bar."""

    def emit(self, record):
        try:
            stream = sys.stdout if getattr(record, "result", False) else console.stream()
            tqdm.write(self.format(record), file=stream)
        except Exception:
            self.handleError(record)


def _names_a_level(value) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or str(value).lower() in _LEVEL_NAMES


def _line_format(format) -> str:
    if format is None:
        return _FORMAT
    if isinstance(format, str) and "%(" in format:
        return format
    if isinstance(format, (bool, str)) and format in LINE_FORMATS:
        return LINE_FORMATS[format]
    raise ConfigError(f"set_logger: unknown format {format!r}; use one of {', '.join(map(repr, LINE_FORMATS))}, "
                      f"or a logging format string such as '%(asctime)s %(message)s'")


def _as_level(level) -> int:
    if isinstance(level, int):
        return level
    value = logging.getLevelName(str(level).upper())
    if not isinstance(value, int):
        raise ConfigError(f"set_logger: unknown level {level!r}; use debug, info, warning or error")
    return value
