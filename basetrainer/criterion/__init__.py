"""Losses by name; see :func:`~basetrainer.criterion.get_criterion`."""
from .criterion import get_criterion
from .losses import FocalLoss, OneHotBCEWithLogitsLoss, WeightedLosses

__all__ = ["FocalLoss", "OneHotBCEWithLogitsLoss", "WeightedLosses", "get_criterion"]
