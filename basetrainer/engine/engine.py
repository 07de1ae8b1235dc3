"""Old import path of ``Engine``, the loop under the old trainer: :class:`.trainer.EngineTrainer` is that loop now."""
from .trainer import EngineTrainer as Engine

__all__ = ["Engine"]
