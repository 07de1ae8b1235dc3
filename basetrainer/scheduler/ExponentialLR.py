"""Old import path: ``ExponentialLR`` is ``get_scheduler("exp", ...)`` with the old arguments."""
from .build_scheduler import LRSchedulerCallback, get_scheduler


def ExponentialLR(optimizer, epochs, num_steps, lr_init=0.01, num_warn_up=0, decay=0.90) -> LRSchedulerCallback:
    """The lr falling to ``lr_init * decay ** 50`` over ``epochs``, after ``num_warn_up`` epochs of warm-up.

    Earlier versions spread ``decay ** 50`` over the run whatever its length; in
    ``get_scheduler("exp")`` terms that is ``gamma = decay ** (50 / epochs)`` per epoch.
    """
    return get_scheduler("exp", optimizer, lr_init, epochs, num_steps, num_warn_up=num_warn_up,
                         gamma=decay ** (50 / epochs))
