"""The log file handler: created with its folder on the first line, and optionally rotated and pruned.

``rotation`` and ``retention`` take the forms the earlier library's ``set_logger`` passed to
loguru: ``rotation`` a size (``"10 MB"``, or a number of bytes) or an interval (``"1 days"``,
``"12 hours"``, a ``datetime.timedelta``); ``retention`` an age (``"7 days"``, ``"1 months"``),
a total size of the rotated files (``"20 GB"``), or a number of rotated files to keep. A rotated
file is renamed ``<name>.<YYYY-mm-dd_HH-MM-SS_ffffff><ext>`` beside the log, as loguru names them.
"""
import datetime
import errno
import logging.handlers
import os
import re
import sys
import time

from ..errors import ConfigError

_SIZES = {"b": 1, "byte": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}
_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400, "month": 30 * 86400,
            "year": 365 * 86400}
_QUANTITY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]+?)s?\s*$")
_STAMP = "%Y-%m-%d_%H-%M-%S_%f"


def log_file_handler(path: str, rotation=None, retention=None) -> logging.Handler:
    """A handler appending to ``path``, rotated by ``rotation`` and pruned by ``retention`` when given."""
    max_bytes, interval = _rotation(rotation)
    if retention is not None and rotation is None:
        raise ConfigError(f"set_logger: retention={retention!r} needs rotation: without it nothing is rotated to "
                          f"prune; pass rotation as well (e.g. rotation='1 days')")
    return _LogFile(path, max_bytes, interval, _retention(retention))


class _LogFile(logging.handlers.BaseRotatingHandler):
    """Appends to a log file that, with its folder, is created when the first line is written: a run
    that stops at its first checks (a config typo, missing data) leaves nothing behind."""

    def __init__(self, path, max_bytes=None, interval=None, retention=None):
        super().__init__(path, mode="a", encoding="utf-8", delay=True)
        self.max_bytes, self.interval, self.retention = max_bytes, interval, retention
        self.opened_at = None
        self.full = False  # the disk was full at a line: said once, and the lines go on to the console alone

    def handleError(self, record) -> None:
        """A full disk is one line on stderr, said once, instead of logging's traceback for every line; the
        console keeps every line, and whatever stopped the run for want of space says so itself."""
        error = sys.exc_info()[1]
        if not (isinstance(error, OSError) and error.errno == errno.ENOSPC):
            super().handleError(record)
        else:
            self._say_full()

    def close(self) -> None:
        """Closes the file; the lines a full disk kept in its buffer are lost, as said when it filled."""
        try:
            super().close()
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
            self._say_full()
            self.stream = None

    def _say_full(self) -> None:
        if not self.full:
            self.full = True
            print(f"warning: {self.baseFilename}: no space left on device; log lines go to the console only",
                  file=sys.stderr)

    def _open(self):
        os.makedirs(os.path.dirname(self.baseFilename), exist_ok=True)
        self.opened_at = time.time()
        return super()._open()

    def shouldRollover(self, record) -> bool:
        if self.stream is None:  # nothing written yet, or just rotated: the line starts the file
            return False
        if self.interval is not None:
            return time.time() - self.opened_at >= self.interval
        if self.max_bytes is not None:
            written = self.stream.tell()
            return written > 0 and written + len(self.format(record)) + 1 > self.max_bytes
        return False

    def doRollover(self) -> None:
        if self.stream:
            self.stream.close()
            self.stream = None
        root, extension = os.path.splitext(self.baseFilename)
        os.replace(self.baseFilename, f"{root}.{datetime.datetime.now().strftime(_STAMP)}{extension}")
        if self.retention is not None:
            self._prune(root, extension)

    def _prune(self, root, extension) -> None:
        folder, stem = os.path.split(root)
        rotated = sorted((os.path.join(folder, name) for name in os.listdir(folder)
                          if name.startswith(stem + ".") and name.endswith(extension)
                          and os.path.join(folder, name) != self.baseFilename),
                         key=os.path.getmtime, reverse=True)
        kind, limit = self.retention
        if kind == "files":
            stale = rotated[int(limit):]
        elif kind == "seconds":
            stale = [path for path in rotated if time.time() - os.path.getmtime(path) > limit]
        else:
            total, stale = 0, []
            for path in rotated:
                total += os.path.getsize(path)
                if total > limit:
                    stale.append(path)
        for path in stale:
            os.remove(path)


def _rotation(rotation):
    """(max bytes, interval in seconds): one of them, or neither."""
    if rotation is None:
        return None, None
    if isinstance(rotation, datetime.timedelta):
        return None, rotation.total_seconds()
    kind, amount = _quantity(rotation, "rotation", counts=False)
    return (amount, None) if kind == "bytes" else (None, amount)


def _retention(retention):
    """("files" | "seconds" | "bytes", limit), or None."""
    if retention is None:
        return None
    if isinstance(retention, datetime.timedelta):
        return "seconds", retention.total_seconds()
    return _quantity(retention, "retention", counts=True)


def _quantity(value, key: str, counts: bool):
    """("bytes" | "seconds" | "files", amount) from "10 MB", "3 days", or a number (bytes, or files kept)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return ("files" if counts else "bytes"), value
    match = _QUANTITY.match(str(value).lower())
    if match and match.group(2) in _SIZES:
        return "bytes", float(match.group(1)) * _SIZES[match.group(2)]
    if match and match.group(2) in _SECONDS:
        return "seconds", float(match.group(1)) * _SECONDS[match.group(2)]
    number = "a number of files to keep" if counts else "a number of bytes"
    raise ConfigError(f"set_logger: cannot read {key}={value!r}; give a size ('10 MB'), a time ('1 days', "
                      f"'12 hours') or {number}")
