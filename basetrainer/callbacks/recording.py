"""What recorders of metrics share: the batch's loss, and how a phase's values are reduced over ranks."""
from ..engine.events import Callback
from ..utils.batch import total_loss


def batch_loss(callback: Callback, losses):
    """The batch's total loss, detached: the run state's copy when the callback is attached
    (one detach per batch for all callbacks), else computed from ``losses``."""
    state = callback.state
    if state is not None and state.loss is not None:
        return state.loss
    return total_loss(losses).detach()


def phase_reduction(callback: Callback, phase: str):
    """How a recorder publishes ``phase`` ("train"/"test"): None when the trainer has no loader
    for it (nothing to publish), else whether its values must be summed over ranks. Every rank
    gets the same answer, so all take part in the same reductions. Without a trainer: False."""
    trainer = callback.trainer
    if trainer is None:
        return False
    if trainer.loader(phase) is None:
        return None
    return trainer.is_sharded(phase)
