"""Optimizers by name; see :func:`~basetrainer.optimizer.get_optimizer`."""
from .build_optimizer import get_optimizer

__all__ = ["get_optimizer"]
