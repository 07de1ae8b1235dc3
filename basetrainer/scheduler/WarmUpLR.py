"""Old import path: ``WarmUpLR`` is ``get_scheduler("constant", ...)``: a warm-up, then ``lr_init``."""
import math

from .build_scheduler import LRSchedulerCallback, get_scheduler


def WarmUpLR(optimizer, num_steps, lr_init=0.01, num_warn_up=0) -> LRSchedulerCallback:
    """A linear warm-up to ``lr_init`` over ``num_warn_up`` epochs, then ``lr_init``."""
    # The constant schedule does not depend on the run's length: any num_epochs covering the warm-up will do.
    return get_scheduler("constant", optimizer, lr_init, max(1, math.ceil(num_warn_up)), num_steps,
                         num_warn_up=num_warn_up)
