"""LoggerFanOut: one run's loggers behind one object, so that a failing tracker costs only itself."""
import os

from ..errors import disk_full, one_line
from ..utils.log import get_logger
from .base import Logger


class LoggerFanOut:
    """Hands each record to every logger it owns, in order (see :class:`~.base.Logger` for the calls).

    A logger that raises (a tracker whose server went away, whose library cannot start) is
    named in one error line and dropped: the run goes on with the others, and the dropped one
    is not called again, not even to be closed. A full disk stops the run instead, in one line
    (:class:`~basetrainer.errors.DiskFullError`): the run's next checkpoint would not fit either. ``close`` ends the
    loggers once; later calls do nothing. The loggers' states (a tracker's run id) are
    kept by name, also those of loggers dropped along the way, so a resumed run continues
    their runs.
    """

    def __init__(self, loggers=()):
        self.loggers = list(loggers)  # every logger given, for their states
        self._active = list(self.loggers)

    @property
    def active(self) -> list:
        """The loggers still written to."""
        return list(self._active)

    def start(self, history: list, resumed: bool, step) -> None:
        self._each("start", history, resumed, step)

    def log_params(self, params: dict) -> None:
        self._each("log_params", params)

    def log_metrics(self, scalars: dict, step: int) -> None:
        self._each("log_metrics", scalars, step)

    def log_epoch(self, record: dict, step: int) -> None:
        self._each("log_epoch", record, step)

    def log_text(self, name: str, text: str, step: int) -> None:
        self._each("log_text", name, text, step)

    def log_artifacts(self, paths) -> None:
        """Hands every file of ``paths`` that exists to each logger."""
        for path in (path for path in paths if path and os.path.isfile(path)):
            self._each("log_artifact", path)

    def close(self, failed: bool = False) -> None:
        self._each("close", failed)
        self._active = []

    def state_dict(self) -> dict:
        states = {logger.name: logger.state_dict() for logger in self.loggers}
        return {name: state for name, state in states.items() if state}

    def load_state_dict(self, states: dict) -> None:
        for logger in self.loggers:
            logger.load_state_dict(states.get(logger.name, {}))

    def _each(self, call: str, *args) -> None:
        for logger in list(self._active):
            try:
                getattr(logger, call)(*args)
            except Exception as error:  # a logger's failure is its own: training and the other loggers go on
                if disk_full(error) is not None:  # but a full disk is the run's: its next checkpoint would not fit
                    raise disk_full(error) from None
                self._active.remove(logger)
                get_logger().error("logger %s failed in %s and is dropped, training goes on without it: %s: %s",
                                   _name(logger), call, type(error).__name__, one_line(error))


def _name(logger: Logger) -> str:
    return getattr(logger, "name", None) or type(logger).__name__
