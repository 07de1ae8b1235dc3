"""Old import path of ``Base``, the callback base class of earlier versions: now :class:`.events.Callback`."""
from .events import Callback as Base

__all__ = ["Base"]
