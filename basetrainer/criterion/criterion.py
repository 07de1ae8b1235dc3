"""Losses by name, alone or as a weighted combination."""
import numbers
from typing import Dict, Optional, Sequence, Union

import torch
from torch import nn

from ..errors import ConfigError
from ..utils.log import get_logger
from ..utils.names import lookup_name
from .losses import FocalLoss, OneHotBCEWithLogitsLoss, WeightedLosses

logger = get_logger()

# Spellings users write (case, "-" and "_" ignored) -> the loss they mean.
_NAMES = {
    "crossentropyloss": "CrossEntropyLoss", "crossentropy": "CrossEntropyLoss", "celoss": "CrossEntropyLoss",
    "ce": "CrossEntropyLoss",
    "labelsmoothing": "LabelSmoothing", "labelsmooth": "LabelSmoothing", "labelsmoothingloss": "LabelSmoothing",
    "focalloss": "FocalLoss", "focal": "FocalLoss",
    "bcewithlogitsloss": "BCEWithLogitsLoss", "bcewithlogits": "BCEWithLogitsLoss",
    "l1loss": "L1Loss", "l1": "L1Loss", "mae": "L1Loss",
    "mseloss": "MSELoss", "mse": "MSELoss", "l2loss": "MSELoss",
    "smoothl1loss": "SmoothL1Loss", "smoothl1": "SmoothL1Loss",
}
KNOWN_LOSSES = (
    "CrossEntropyLoss (CELoss), LabelSmoothing, FocalLoss, BCEWithLogitsLoss, L1Loss, MSELoss (mse), SmoothL1Loss"
)
_REGRESSION = {"L1Loss": nn.L1Loss, "MSELoss": nn.MSELoss, "SmoothL1Loss": nn.SmoothL1Loss}


def loss_name(loss_type: str) -> str:
    """The loss ``loss_type`` names (case, ``-``, ``_`` and spaces ignored); a ConfigError listing them otherwise."""
    return lookup_name(_NAMES, loss_type, "loss_type", KNOWN_LOSSES)


def get_criterion(
    loss_type: Union[str, Sequence[str], Dict[str, float]],
    num_classes: Optional[int] = None,
    class_weight=None,
    device=None,
    *,
    label_smoothing: float = 0.0,
    focal_gamma: float = 2.0,
) -> nn.Module:
    """The loss module named ``loss_type`` (case-insensitive), called as ``loss(outputs, targets)``.

    A dict ``{name: weight}`` (or a list of names, each weighted 1) gives a module that
    returns ``{name: weight * loss}``. ``class_weight`` (one number per class) applies to
    CrossEntropyLoss, LabelSmoothing, FocalLoss and BCEWithLogitsLoss and is moved to
    ``device``. ``label_smoothing`` applies to CrossEntropyLoss; LabelSmoothing is
    CrossEntropyLoss with it (0.1 unless given). BCEWithLogitsLoss one-hot encodes integer
    class labels over the logits' classes, so it takes the same ``(logits, labels)`` as CE.
    """
    if isinstance(loss_type, (dict, list, tuple)):
        weights = dict(loss_type) if isinstance(loss_type, dict) else {name: 1.0 for name in loss_type}
        if not weights:
            raise ConfigError(f"loss_type is empty; name at least one of: {KNOWN_LOSSES}")
        for name, weight in weights.items():
            if not isinstance(weight, numbers.Real):
                raise ConfigError(f"loss_type weight for {name!r} must be a number, got {weight!r}")
        losses = {
            name: get_criterion(name, num_classes, class_weight, device,
                                label_smoothing=label_smoothing, focal_gamma=focal_gamma)
            for name in weights
        }
        return WeightedLosses(losses, weights)

    name = loss_name(loss_type)
    weight = _class_weight_tensor(class_weight, num_classes)

    if name == "CrossEntropyLoss":
        criterion = nn.CrossEntropyLoss(weight=weight, label_smoothing=label_smoothing)
    elif name == "LabelSmoothing":
        criterion = nn.CrossEntropyLoss(weight=weight, label_smoothing=label_smoothing or 0.1)
    elif name == "FocalLoss":
        criterion = FocalLoss(gamma=focal_gamma, weight=weight)
    elif name == "BCEWithLogitsLoss":
        # A (C,) weight broadcasts over (N, C) logits: one weight per class.
        criterion = OneHotBCEWithLogitsLoss(weight=weight)
    else:
        if weight is not None:
            logger.warning("class_weight is ignored by %s: it weighs values, not classes", name)
        criterion = _REGRESSION[name]()
    return criterion.to(device) if device is not None else criterion


def _class_weight_tensor(class_weight, num_classes):
    if class_weight is None:
        return None
    try:
        weight = torch.as_tensor(class_weight, dtype=torch.float32).flatten()
    except (TypeError, ValueError, RuntimeError):
        raise ConfigError(f"class_weight must be a list of numbers, one per class; got {class_weight!r}") from None
    if num_classes and len(weight) != num_classes:
        raise ConfigError(f"class_weight has {len(weight)} values but num_classes is {num_classes}; give one per class")
    return weight
