"""Network slimming's training half: an L1 penalty that drives unneeded BN scales to zero.

``prune_mod="Slim"`` removes the channels whose BatchNorm scale is smallest. On a model
trained as usual those scales are all alike; train first with the penalty added to the
loss so that the unneeded ones shrink, then prune, then fine-tune without it::

    loss = criterion(outputs, targets) + bn_l1_penalty(model, 1e-4)
"""
import torch
from torch import nn


def bn_l1_penalty(model: nn.Module, strength: float) -> torch.Tensor:
    """``strength * sum(|gamma|)`` over every BatchNorm scale of ``model``, as a tensor to add to the loss."""
    scales = [
        module.weight.abs().sum()
        for module in model.modules()
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.weight is not None
    ]
    if not scales:
        return torch.zeros(())
    return strength * torch.stack(scales).sum()
