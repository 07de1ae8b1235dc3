"""Errors a user can act on.

Each one carries a single line that names the problem and the fix. Entry points
(``launch``, the example, the ``basetrainer`` command) print that line and exit non-zero
instead of showing a traceback (:func:`basetrainer.utils.console.exit_with`).
"""
import errno


class BaseTrainerError(Exception):
    """A problem with the user's input or environment, explained in one line."""

    exit_code = 2


class ConfigError(BaseTrainerError):
    """A config key or value is wrong."""


class DataError(BaseTrainerError):
    """The data cannot be read or yields nothing to train on."""


class CheckpointError(BaseTrainerError):
    """A checkpoint cannot be read or written."""


class DiskFullError(BaseTrainerError, OSError):
    """A file could not be written: no space left on its device. It is also an ``OSError`` (errno ``ENOSPC``), so
    that code catching ``OSError`` around a write sees it as before."""

    def __init__(self, message: str):
        OSError.__init__(self, errno.ENOSPC, message)

    def __str__(self):
        return self.strerror


class LaunchError(BaseTrainerError):
    """Processes or devices cannot be set up as asked."""


class NonFiniteLossError(BaseTrainerError):
    """The loss became NaN or infinite."""

    exit_code = 3


class TrainingInterrupted(BaseTrainerError):
    """A stop signal arrived; the state was saved and the run can be resumed."""

    exit_code = 75  # EX_TEMPFAIL: try again later, with resume: auto


class TrainingAlreadyFinished(BaseTrainerError):
    """A replica group restarted just before the others finished the training: nothing is left for it to do. It has
    said so in its log; it ends with 0, as the job does."""

    exit_code = 0


class WatchdogTimeout(BaseTrainerError):
    """A rank stopped making progress (it, or a peer, hung or died); its watchdog ended the process."""

    exit_code = 124  # as timeout(1): a restart (torchrun, the scheduler) takes over


def one_line(error: BaseException) -> str:
    """The error's message on one line.

    An error raised in a DataLoader worker comes back with the worker's traceback in its
    message; this returns the original message instead (keeping a ``rank N:`` prefix).
    """
    lines = [line for line in str(error).splitlines() if line.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else type(error).__name__
    prefix = f"{type(error).__module__}.{type(error).__name__}: "
    original = [line[len(prefix):] for line in lines if line.startswith(prefix)]
    rank = lines[0].split(":", 1)[0] + ": " if lines[0].startswith("rank ") else ""
    return rank + original[-1] if original else " ".join(line.strip() for line in lines)


def disk_full(error: BaseException):
    """A :class:`DiskFullError` for ``error`` when it is, or was caused by, a write that found no space left on its
    device (``ENOSPC``), wherever it was raised; None otherwise, and for an error that says it in its own words
    already (a ``BaseTrainerError``: a checkpoint's names the file and what is intact)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, BaseTrainerError):
            return error if isinstance(error, DiskFullError) else None
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            where = f" writing {error.filename}" if error.filename else ""
            return DiskFullError(f"no space left on device{where}; free some disk space or write elsewhere (work_dir, --out)")
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None

