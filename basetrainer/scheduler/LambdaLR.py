"""Old import path: ``LambdaLR``, YOLOv5's schedule, is ``get_scheduler("cosine" or "poly", ...)``."""
from .build_scheduler import LRSchedulerCallback, get_scheduler


def LambdaLR(optimizer, epochs, num_steps, linear_lr=False, lr_init=0.1, lrf=0.2, num_warn_up=0) -> LRSchedulerCallback:
    """From ``lr_init`` down to ``lrf * lr_init`` over ``epochs``: a half cosine, or a straight line with
    ``linear_lr`` (``poly`` of power 1); after ``num_warn_up`` epochs of warm-up.

    Not to be confused with ``get_scheduler("LambdaLR")``, which names the one-cycle schedule.
    """
    if linear_lr:
        return get_scheduler("poly", optimizer, lr_init, epochs, num_steps, num_warn_up=num_warn_up, power=1.0,
                             min_lr=lrf * lr_init)
    return get_scheduler("cosine", optimizer, lr_init, epochs, num_steps, num_warn_up=num_warn_up,
                         min_lr=lrf * lr_init)
