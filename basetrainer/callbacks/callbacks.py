"""Old import path of the callback base class; the event protocol lives in :mod:`basetrainer.engine.events`."""
from ..engine.events import (
    EVENTS,
    HIGH,
    HIGHEST,
    LATE,
    LOW,
    LOWEST,
    NORMAL,
    Callback,
    CallbackList,
    batch_loss,
    phase_reduction,
)

__all__ = ["EVENTS", "HIGHEST", "HIGH", "NORMAL", "LATE", "LOW", "LOWEST", "Callback", "CallbackList", "batch_loss",
           "phase_reduction"]
