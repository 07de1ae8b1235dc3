"""Learning-rate schedules by name, as callbacks; see :func:`~basetrainer.scheduler.get_scheduler`."""
from .build_scheduler import LRSchedulerCallback, get_scheduler

__all__ = ["LRSchedulerCallback", "get_scheduler"]
