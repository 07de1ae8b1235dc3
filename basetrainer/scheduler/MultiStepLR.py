"""Old import path: ``MultiStepLR`` is ``get_scheduler("multi-step", ...)`` with the old arguments."""
from .build_scheduler import LRSchedulerCallback, get_scheduler


def MultiStepLR(optimizer, epochs, num_steps, milestones, lr_init=0.01, num_warn_up=0,
                gamma=0.1) -> LRSchedulerCallback:
    """The lr times ``gamma`` at each epoch of ``milestones``, after ``num_warn_up`` epochs of warm-up."""
    return get_scheduler("multi-step", optimizer, lr_init, epochs, num_steps, milestones=milestones,
                         num_warn_up=num_warn_up, gamma=gamma)
