"""Losses that torch lacks in the form a classification trainer calls them: ``loss(logits, labels)``."""
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import nn


class FocalLoss(nn.Module):
    """Softmax focal loss (Lin et al., 2017): cross-entropy scaled by ``(1 - p_target) ** gamma``.

    Down-weights easy, well-classified samples. ``weight`` is a per-class weight; the mean
    is taken over the samples' weights, as in ``CrossEntropyLoss``, so ``gamma=0`` gives
    exactly cross-entropy. Logits are ``(N, C, ...)``, targets class indices ``(N, ...)``.
    """

    def __init__(self, gamma: float = 2.0, weight: Optional[torch.Tensor] = None, reduction: str = "mean"):
        super().__init__()
        self.gamma = gamma
        self.reduction = reduction
        self.register_buffer("weight", weight)

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        log_p = F.log_softmax(logits, dim=1).gather(1, target.unsqueeze(1)).squeeze(1)
        losses = -((1.0 - log_p.exp()).clamp(min=0.0) ** self.gamma) * log_p
        sample_weight = self.weight[target] if self.weight is not None else torch.ones_like(losses)
        losses = losses * sample_weight
        if self.reduction == "none":
            return losses
        if self.reduction == "sum":
            return losses.sum()
        return losses.sum() / sample_weight.sum()


class OneHotBCEWithLogitsLoss(nn.BCEWithLogitsLoss):
    """``nn.BCEWithLogitsLoss`` that also takes integer class labels, like ``CrossEntropyLoss``.

    Integer targets shaped ``(N, ...)`` for logits ``(N, C, ...)`` are one-hot encoded over
    the C classes, so the same ``loss(logits, labels)`` call works for both losses; float
    targets (and integer ones shaped like the logits, e.g. multi-label 0/1) are used as given.
    """

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if not target.is_floating_point():
            if target.shape != logits.shape:
                target = F.one_hot(target, logits.shape[1]).movedim(-1, 1)
            target = target.to(logits.dtype)
        return super().forward(logits, target)


class WeightedLosses(nn.Module):
    """Several losses of the same ``(outputs, targets)``; returns ``{name: weight * loss}``.

    The trainer sums the terms for backward, and ``MultiLossesRecorder`` shows each one.
    """

    def __init__(self, losses: Dict[str, nn.Module], weights: Dict[str, float]):
        super().__init__()
        self.losses = nn.ModuleDict(losses)
        self.weights = dict(weights)

    def forward(self, outputs, targets) -> Dict[str, torch.Tensor]:
        return {name: self.weights[name] * loss(outputs, targets) for name, loss in self.losses.items()}
