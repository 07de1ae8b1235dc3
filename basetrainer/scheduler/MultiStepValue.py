"""Old import path of ``MultiStepValue``, a schedule of arbitrary values that basetrainer does not keep."""
raise ImportError(
    "basetrainer.scheduler.MultiStepValue was removed: basetrainer schedules learning rates only "
    "(basetrainer.scheduler.get_scheduler); for another value per epoch use "
    "values[bisect.bisect_right(milestones, epoch)]"
)
