"""The default backend: torch-pruning removes channels, following residual and depthwise links.

torch-pruning traces the model once, groups the layers whose channels must be removed
together (a residual sum, a depthwise convolution and its neighbours, the classifier's
inputs) and cuts each group at the same indices, so the result runs as it is.
"""
from torch import nn
from torch.nn.utils import prune as torch_prune

from ..errors import ConfigError


def import_torch_pruning():
    """The ``torch_pruning`` module, or a one-line error that says how to install it."""
    try:
        import torch_pruning
    except Exception as error:  # a broken install raises other errors than ImportError
        raise ConfigError(
            f'pruning needs torch-pruning, which cannot be imported ({type(error).__name__}: {error}): '
            f'pip install "basetrainer[prune]"'
        ) from error
    return torch_pruning


def prune_channels(model, example_input, sparsity: float, mode: str, ignored_layers, record=None) -> list:
    """Removes ``sparsity`` of every group's channels, ranked by ``mode``; returns the record.

    The record (torch-pruning's pruning history: layer names and removed indices) can be
    passed back as ``record`` to remove exactly the same channels from another copy of
    the model.
    """
    tp = import_torch_pruning()
    importance = {
        "L1": lambda: tp.importance.MagnitudeImportance(p=1),
        "L2": lambda: tp.importance.MagnitudeImportance(p=2),
        "FPGM": lambda: tp.importance.FPGMImportance(),
        "Slim": lambda: tp.importance.BNScaleImportance(),
    }[mode]()
    pruner = tp.pruner.BasePruner(
        model, example_input, importance=importance, pruning_ratio=sparsity, ignored_layers=list(ignored_layers)
    )
    if record is None:
        pruner.step()
    else:
        pruner.load_pruning_history(record)
    return [[name, bool(is_output), [int(i) for i in indices]] for name, is_output, indices in pruner.pruning_history()]


def prune_weights(model: nn.Module, sparsity: float, ignored_layers) -> None:
    """Level mode: zeroes the smallest ``sparsity`` of each convolution's and linear layer's weights."""
    ignored = set(ignored_layers)
    for module in model.modules():
        if isinstance(module, (nn.modules.conv._ConvNd, nn.Linear)) and module not in ignored:
            torch_prune.l1_unstructured(module, "weight", amount=sparsity)
            # Make the zeros permanent: no mask, no forward pre-hook, a plain weight again.
            torch_prune.remove(module, "weight")
