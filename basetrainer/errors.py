"""Errors a user can act on.

Each one carries a single line that names the problem and the fix. Entry points
(``launch``, the example, the ``basetrainer`` command) print that line and exit non-zero
instead of showing a traceback.
"""


class BaseTrainerError(Exception):
    """A problem with the user's input or environment, explained in one line."""

    exit_code = 2


class ConfigError(BaseTrainerError):
    """A config key or value is wrong."""


class DataError(BaseTrainerError):
    """The data cannot be read or yields nothing to train on."""


class CheckpointError(BaseTrainerError):
    """A checkpoint cannot be read or written."""


class LaunchError(BaseTrainerError):
    """Processes or devices cannot be set up as asked."""


class NonFiniteLossError(BaseTrainerError):
    """The loss became NaN or infinite."""

    exit_code = 3


class TrainingInterrupted(BaseTrainerError):
    """A stop signal arrived; the state was saved and the run can be resumed."""

    exit_code = 75  # EX_TEMPFAIL: try again later, with resume: auto
