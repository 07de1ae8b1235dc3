"""Old import path of the trainer's progress bar, :mod:`basetrainer.engine.progress`."""
from ..engine.progress import ProgressBar

__all__ = ["ProgressBar"]
