"""Old import path: ``CosineAnnealingLR`` and ``CosineLR`` are ``get_scheduler("cosine", ...)``, old arguments."""
from ..errors import ConfigError
from .build_scheduler import LRSchedulerCallback, get_scheduler


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
