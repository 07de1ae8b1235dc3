"""Activation checkpointing: chosen modules keep no activations in forward and recompute them in backward.

Memory for compute: the forward of each module of the classes named in
``activation_checkpointing`` runs again during backward instead of keeping its
intermediate tensors, so the gradients are those of the plain model. It is torch's
``checkpoint_wrapper`` (non-reentrant ``torch.utils.checkpoint``), applied before any
parallel wrapper, in every strategy. The wrapper's ``_checkpoint_wrapped_module.`` never
reaches ``state_dict`` keys: the wrapper removes it itself.
"""
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    apply_activation_checkpointing,
    checkpoint_wrapper,
)

from ..errors import ConfigError
from ..utils.log import get_logger

logger = get_logger()


def checkpoint_activations(model: nn.Module, class_names) -> nn.Module:
    """Wraps every submodule of ``model`` whose class is named in ``class_names`` (in place; returns ``model``);
    ``[auto]``: the blocks the model names itself (a transformers model's decoder layers, ``_no_split_modules``)."""
    names = set(class_names or ())
    if not names:
        return model
    if names == {"auto"}:
        names = set(named_blocks(model))
        if not names:
            raise ConfigError("activation_checkpointing [auto]: this model names no blocks (_no_split_modules); "
                              "name the classes, e.g. [BasicBlock]")
    check_class_names(model, names, "activation_checkpointing")
    wrapped = [name for name, module in model.named_modules() if type(module).__name__ in names]
    apply_activation_checkpointing(
        model, checkpoint_wrapper_fn=lambda module: checkpoint_wrapper(module, CheckpointImpl.NO_REENTRANT),
        check_fn=lambda module: type(module).__name__ in names)
    logger.info("activation checkpointing: %d module(s) of %s recompute their activations in backward",
                len(wrapped), ", ".join(sorted(names)))
    return model


def check_class_names(model: nn.Module, names, key: str) -> None:
    """Raises a one-line ConfigError when a name in ``names`` is no class of ``model``'s submodules."""
    present = {type(module).__name__ for module in model.modules()}
    unknown = sorted(set(names) - present)
    if unknown:
        raise ConfigError(f"{key}: {', '.join(unknown)} is no module class of this model; "
                          f"its classes are {', '.join(sorted(present))}")


def named_blocks(model: nn.Module) -> tuple:
    """The classes of the blocks ``model`` names itself, sorted: those of ``_no_split_modules`` (transformers' models:
    their decoder layers, ``LlamaDecoderLayer``) present in it; empty when it names none."""
    named = {name for module in model.modules() for name in (getattr(module, "_no_split_modules", None) or ())}
    present = {type(getattr(module, "_checkpoint_wrapped_module", module)).__name__ for module in model.modules()}
    return tuple(sorted(named & present))
