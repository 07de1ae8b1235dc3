"""The optional NNI backend (NNI 2.10): NNI's pruners choose channels, ModelSpeedup removes them.

NNI 3.0's ModelSpeedup fails on current torch, so only NNI 2.x is accepted; pin it with
``pip install "basetrainer[nni]"`` (nni==2.10.1).
"""
import torch
from torch import nn

from ..errors import ConfigError

_INSTALL_HINT = 'pip install "basetrainer[nni]" (nni==2.10.1), or use backend="torch-pruning"'


def import_nni():
    """The ``nni`` module when it is a 2.x release, or a one-line error that says what to install."""
    try:
        import nni
    except Exception as error:  # a broken install raises other errors than ImportError
        raise ConfigError(
            f"backend='nni' needs NNI 2.10, which cannot be imported ({type(error).__name__}: {error}): {_INSTALL_HINT}"
        ) from error
    version = getattr(nni, "__version__", "0")
    if int(version.split(".")[0]) >= 3:
        raise ConfigError(f"NNI {version}'s ModelSpeedup does not work with torch {torch.__version__}: {_INSTALL_HINT}")
    return nni


def prune_with_nni(model: nn.Module, example_input, sparsity: float, mode: str, ignored_names, record=None) -> dict:
    """Prunes ``model`` in place with NNI and returns the record (NNI's masks) for reuse.

    Given a ``record`` from an earlier call, its masks are applied instead of computing new
    ones. Level masks only zero weights; the other modes' masks are removed by ModelSpeedup.
    """
    nni = import_nni()
    from nni.compression.pytorch.pruning import FPGMPruner, L1NormPruner, L2NormPruner, LevelPruner, SlimPruner
    from nni.compression.pytorch.speedup import ModelSpeedup

    masks = record
    if masks is None:
        op_types = {"Slim": ["BatchNorm2d"], "Level": ["Conv2d", "Linear"]}.get(mode, ["Conv2d"])
        config_list = [{"sparsity_per_layer": sparsity, "op_types": op_types}]
        if ignored_names:
            config_list.append({"exclude": True, "op_names": list(ignored_names)})
        if mode == "Slim":
            # No training inside the pruner: it ranks the BN scales the model already has,
            # sparsified beforehand by training with bn_l1_penalty.
            optimizer = nni.trace(torch.optim.SGD)(model.parameters(), lr=0.0)
            pruner = SlimPruner(
                model, config_list, trainer=_no_training, traced_optimizer=optimizer,
                criterion=None, training_epochs=0, mode="normal",
            )
        elif mode == "Level":
            pruner = LevelPruner(model, config_list)
        else:
            pruner_class = {"L1": L1NormPruner, "L2": L2NormPruner, "FPGM": FPGMPruner}[mode]
            # Channels joined by a residual sum or a depthwise convolution are pruned alike;
            # otherwise ModelSpeedup has to keep most of them.
            pruner = pruner_class(model, config_list, mode="dependency_aware", dummy_input=example_input)
        _, masks = pruner.compress()
        pruner._unwrap_model()  # NNI's documented step before speed-up: plain modules again
    # Copied before ModelSpeedup, which rewrites the masks it is given.
    record = {name: {key: mask.cpu() for key, mask in layer.items()} for name, layer in masks.items()}
    masks = {name: {key: mask.to(example_input.device) for key, mask in layer.items()} for name, layer in record.items()}
    if mode == "Level":
        _apply_weight_masks(model, masks)
    else:
        ModelSpeedup(model, example_input, masks).speedup_model()
    return record


def _no_training(model, optimizer, criterion):
    pass


@torch.no_grad()
def _apply_weight_masks(model: nn.Module, masks: dict) -> None:
    modules = dict(model.named_modules())
    for name, tensor_masks in masks.items():
        for tensor_name, mask in tensor_masks.items():
            getattr(modules[name], tensor_name).mul_(mask)
