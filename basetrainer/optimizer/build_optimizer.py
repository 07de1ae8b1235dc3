"""Optimizers by name: SGD, Adam, AdamW, RMSprop."""
from typing import Iterable, Optional, Union

import torch
from torch import nn

from ..errors import ConfigError
from ..utils.arguments import as_keywords

_OPTIMIZERS = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW", "rmsprop": "RMSprop"}
_ORDER = ("optim_type", "lr", "momentum", "weight_decay")
_EARLIER_ORDER = ("parameters", "optim_type", "lr", "split_params")
_FIRST_ORDER = ("optim_type", "lr", "split_params")


def optimizer_name(optim_type: str) -> str:
    """The optimizer ``optim_type`` names (any case): SGD, Adam, AdamW or RMSprop; a ConfigError otherwise."""
    key = str(optim_type).lower()
    if key not in _OPTIMIZERS:
        raise ConfigError(f"unknown optim_type {optim_type!r}; use one of: {', '.join(_OPTIMIZERS.values())}")
    return _OPTIMIZERS[key]


def get_optimizer(model, *args, **kwargs) -> torch.optim.Optimizer:
    """Builds ``torch.optim.<optim_type>`` for a model or explicit param groups: see
    :func:`~basetrainer.optimizer.build_optimizer.create_optimizer` for the keywords.

    Positional arguments after ``model`` are read as ``(optim_type, lr, momentum, weight_decay)``,
    or in the earlier library's orders, told apart by their types: ``(parameters, optim_type, lr,
    split_params)`` when a list of tensors comes first (its releases from 2023 on), ``(optim_type,
    lr, split_params)`` when the third is a bool (its first releases).
    """
    if args and not isinstance(args[0], str):
        order = _EARLIER_ORDER
    elif len(args) >= 3 and isinstance(args[2], bool):
        order = _FIRST_ORDER
    else:
        order = _ORDER
    return create_optimizer(model, **as_keywords("get_optimizer", order, args, kwargs))


def create_optimizer(
    model: Union[nn.Module, Iterable],
    optim_type: str = "SGD",
    lr: float = 0.01,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    *,
    nesterov: bool = False,
    betas=(0.9, 0.999),
    eps: float = 1e-8,
    exclude_bias_norm_from_decay: bool = False,
    parameters: Optional[Iterable[torch.Tensor]] = None,
    split_params: bool = False,
    **options,
) -> torch.optim.Optimizer:
    """Builds ``torch.optim.<optim_type>`` for a model or explicit param groups.

    ``model`` is an ``nn.Module``, an iterable of tensors, or a list of param-group dicts
    (a group's own ``lr``/``weight_decay`` win over the arguments here). Names are
    case-insensitive. ``weight_decay`` is 0 unless given, for AdamW too. ``momentum`` applies to SGD and
    RMSprop, ``betas`` to Adam and AdamW, ``eps`` to all but SGD. ``exclude_bias_norm_from_decay`` (old name:
    ``split_params``) gives every 1-D parameter (biases, norm-layer weights, also e.g.
    ConvNeXt's layer scale) ``weight_decay=0``. ``parameters`` are extra tensors trained
    with the model (old API). Other ``options`` go to the torch optimizer (e.g. ``fused``).
    """
    key = optimizer_name(optim_type).lower()
    if key == "sgd" and nesterov and momentum <= 0:
        raise ConfigError("nesterov=True needs momentum > 0; set momentum (e.g. 0.9) or nesterov=False")

    groups = _param_groups(model, parameters)
    if exclude_bias_norm_from_decay or split_params:
        groups = [part for group in groups for part in _split_decay(group)]

    if key == "sgd":
        options.update(momentum=momentum, nesterov=nesterov)
    elif key in ("adam", "adamw"):
        options.update(betas=tuple(betas), eps=eps)
    else:
        options.update(momentum=momentum, eps=eps)
    optimizer_class = getattr(torch.optim, _OPTIMIZERS[key])
    return optimizer_class(groups, lr=lr, weight_decay=weight_decay, **options)


def _param_groups(model, extra) -> list:
    """The parameters as a list of group dicts (copies: the caller's dicts are not changed)."""
    if isinstance(model, nn.Module):
        items = list(model.parameters())
    else:
        items = list(model)
    if extra:
        items += list(extra)
    if not items:
        raise ConfigError("the optimizer got no parameters; pass a model with parameters or a non-empty param list")
    if all(isinstance(item, dict) for item in items):
        return [dict(group, params=list(group["params"])) for group in items]
    if any(isinstance(item, dict) for item in items):
        raise ConfigError("mix of tensors and param-group dicts; pass either tensors or only dicts")
    return [{"params": items}]


def _split_decay(group: dict) -> list:
    # Decaying biases and norm scales only pulls them towards 0 and hurts accuracy; the
    # 1-D test catches exactly those in torch's standard layers, whatever their module type.
    decay = [p for p in group["params"] if p.ndim > 1]
    no_decay = [p for p in group["params"] if p.ndim <= 1]
    parts = []
    if decay:
        parts.append(dict(group, params=decay))
    if no_decay:
        parts.append(dict(group, params=no_decay, weight_decay=0.0))
    return parts
