"""The old import path, ``basetrainer.pruning.nni_pruning``; the code is in :mod:`basetrainer.pruning`."""
from .pruner import model_pruning

__all__ = ["model_pruning"]
