"""The schedule classes of the earlier library, each one ``get_scheduler`` with the old arguments.

Their old paths (``basetrainer.scheduler.MultiStepLR`` ...) lead here (see :mod:`basetrainer.old_paths`).
"""
import math

from ..errors import ConfigError
from .build_scheduler import LRSchedulerCallback, get_scheduler


def MultiStepLR(optimizer, epochs, num_steps, milestones, lr_init=0.01, num_warn_up=0,
                gamma=0.1) -> LRSchedulerCallback:
    """The lr times ``gamma`` at each epoch of ``milestones``, after ``num_warn_up`` epochs of warm-up."""
    return get_scheduler("multi-step", optimizer, lr_init, epochs, num_steps, milestones=milestones,
                         num_warn_up=num_warn_up, gamma=gamma)


def CosineAnnealingLR(optimizer, epochs, num_steps, num_cycles=1, lr_init=0.1, decay=0.99,
                      num_warn_up=10) -> LRSchedulerCallback:
    """One cosine from ``lr_init`` down to 0 over ``epochs``, after ``num_warn_up`` epochs of warm-up.

    ``decay`` damped later cycles in earlier versions; with the single cycle there is nothing
    to damp, so it is accepted and has no effect (as in the old ``CosineAnnealingLR``).
    """
    if num_cycles != 1:
        raise ConfigError(f"num_cycles={num_cycles}: basetrainer's cosine schedule has one cycle; use num_cycles=1, "
                          f"or torch.optim.lr_scheduler.CosineAnnealingWarmRestarts for restarts")
    return get_scheduler("cosine", optimizer, lr_init, epochs, num_steps, num_warn_up=num_warn_up)


CosineLR = CosineAnnealingLR


def ExponentialLR(optimizer, epochs, num_steps, lr_init=0.01, num_warn_up=0, decay=0.90) -> LRSchedulerCallback:
    """The lr falling to ``lr_init * decay ** 50`` over ``epochs``, after ``num_warn_up`` epochs of warm-up.

    Earlier versions spread ``decay ** 50`` over the run whatever its length; in
    ``get_scheduler("exp")`` terms that is ``gamma = decay ** (50 / epochs)`` per epoch.
    """
    return get_scheduler("exp", optimizer, lr_init, epochs, num_steps, num_warn_up=num_warn_up,
                         gamma=decay ** (50 / epochs))


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


def WarmUpLR(optimizer, num_steps, lr_init=0.01, num_warn_up=0) -> LRSchedulerCallback:
    """A linear warm-up to ``lr_init`` over ``num_warn_up`` epochs, then ``lr_init``."""
    # The constant schedule does not depend on the run's length: any num_epochs covering the warm-up will do.
    return get_scheduler("constant", optimizer, lr_init, max(1, math.ceil(num_warn_up)), num_steps,
                         num_warn_up=num_warn_up)
