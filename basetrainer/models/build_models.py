"""Classification models by name: any torchvision classification model, or any timm model as ``timm/<name>``
(:mod:`.timm_models`), sized for num_classes.

torchvision and timm are imported inside the functions, so importing basetrainer stays light.
"""
import difflib
import numbers
import os
import shutil
import urllib.request
from typing import Sequence, Union

import torch
from torch import nn

from ..errors import CheckpointError, ConfigError
from ..utils.file_utils import atomic_write
from ..utils.log import get_logger
from .timm_models import PREFIX as TIMM_PREFIX
from .timm_models import build_timm_model, is_timm_name, timm_data_defaults, timm_model_name

logger = get_logger()

DOWNLOAD_TIMEOUT_S = 10
# Family names -> the member people usually mean.
_ALIASES = {
    "mobilenet_v3": "mobilenet_v3_large",
    "efficientnet": "efficientnet_b0",
    "convnext": "convnext_tiny",
    "vit": "vit_b_16",
    "regnet": "regnet_y_400mf",
    "swin": "swin_t",
}
_WIDTH_MULT_MODELS = ("mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small")
# What a torchvision network is fed when the config leaves it unset (timm's models say their own).
TORCHVISION_DATA_DEFAULTS = {"input_size": [32, 32], "rgb_mean": [0.5, 0.5, 0.5], "rgb_std": [0.5, 0.5, 0.5]}


def get_models(
    net_type: str,
    input_size: Union[int, Sequence[int], None] = None,
    num_classes: int = 1000,
    width_mult: float = 1.0,
    pretrained: Union[bool, str, os.PathLike, None] = True,
    **kwargs,
) -> nn.Module:
    """The torchvision classification model ``net_type`` (or timm's, ``timm/<name>``) with a ``num_classes``-way head.

    ``net_type`` is ``timm/`` and any name of ``timm.list_models()`` (its pretrained weights through timm's own
    loader; see :mod:`.timm_models`), or any name in ``torchvision.models.list_models(module=torchvision.models)``,
    case-insensitive (also ``mobilenet_v3``, ``efficientnet``, ``convnext``, ``vit``,
    ``regnet``, ``swin`` for their usual member). ``input_size`` (``[w, h]`` or an int)
    sets ViT's ``image_size`` and MaxViT's ``input_size``; other models take any size.
    ``width_mult`` works for the MobileNets. ``pretrained``: False/None for random
    weights, True for torchvision's (from torch.hub's cache, else downloaded), or a path to
    a weights file; layers whose shape differs (the head) keep their fresh weights, with a
    warning. Other ``kwargs`` go to the torchvision builder (e.g. ``dropout``).
    """
    from torchvision import models as tv

    kwargs.pop("is_train", None)  # old API argument; train/eval mode is the trainer's business
    name = check_model_options(net_type, width_mult, pretrained, input_size)
    if isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral) or num_classes < 1:
        raise ConfigError(f"num_classes must be a positive integer, got {num_classes!r}")
    if width_mult != 1.0:
        kwargs["width_mult"] = width_mult
    kwargs.update(_input_size_kwargs(name, input_size))

    if is_timm_name(name):  # timm loads its own weights (pretrained_cfg_overlay for a file)
        return build_timm_model(name, num_classes, input_size, pretrained)
    try:
        model = tv.get_model(name, weights=None, num_classes=num_classes, **kwargs)
    except (ValueError, AssertionError) as error:  # e.g. MaxViT: an input_size its windows do not divide
        raise ConfigError(f"{name} cannot be built for input_size {input_size}: {_first_line(error)}") from None
    if pretrained is True:
        _load_pretrained(model, _torchvision_weights_file(name, tv), name)
    elif pretrained:
        if not os.path.isfile(pretrained):
            raise ConfigError(f"pretrained={str(pretrained)!r}: no such file; give a weights file, True or False")
        _load_pretrained(model, os.fspath(pretrained), name)
    return model


def data_defaults(net_type: str) -> dict:
    """``input_size`` (``[width, height]``), ``rgb_mean`` and ``rgb_std`` for ``net_type`` when a config leaves
    them unset: a timm model's own (its pretrained configuration), else ``TORCHVISION_DATA_DEFAULTS``."""
    if is_timm_name(net_type):
        return timm_data_defaults(net_type)
    return {key: list(value) for key, value in TORCHVISION_DATA_DEFAULTS.items()}


def check_input_size(model: nn.Module, input_size, net_type: str) -> None:
    """Runs ``model`` (on the CPU, in eval mode, without gradients) on one blank image of ``input_size``
    ``[width, height]``: a size the network cannot take (too small for its kernels and strides, not a
    multiple of its patches) is a one-line ConfigError here rather than a traceback at the first batch."""
    width, height = input_size
    training = model.training
    try:
        with torch.no_grad():
            model.eval()(torch.zeros(1, 3, height, width))
    except (RuntimeError, ValueError, AssertionError) as error:
        raise ConfigError(f"net_type {net_type} cannot take input_size {list(input_size)} ({_first_line(error)}); "
                          f"raise input_size, e.g. to [224, 224]") from None
    finally:
        model.train(training)


def _first_line(error) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def check_model_options(net_type: str, width_mult: float = 1.0, pretrained=False, input_size=None) -> str:
    """The torchvision name of ``net_type``, once the options of :func:`get_models` are known to fit it
    (width_mult, pretrained weights, input_size), without building anything; else a one-line ConfigError."""
    name = model_name(net_type)
    if width_mult != 1.0:
        if name not in _WIDTH_MULT_MODELS:
            supported = ", ".join(_WIDTH_MULT_MODELS)
            raise ConfigError(f"{name} has no width_mult; use width_mult=1.0 or one of: {supported}")
        if pretrained is True:
            raise ConfigError(f"torchvision has {name} weights only for width_mult=1.0; set pretrained=False")
    _input_size_kwargs(name, input_size)
    return name


def model_name(net_type: str) -> str:
    """The torchvision model ``net_type`` names (any case, ``-`` for ``_``, family aliases), or ``timm/<name>`` as
    timm spells it; a ConfigError suggesting close names when there is none."""
    if is_timm_name(net_type):
        return TIMM_PREFIX + timm_model_name(net_type)
    from torchvision import models as tv


    names = tv.list_models(module=tv)
    key = str(net_type).lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    if key in names:
        return key
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise ConfigError(
        f"unknown net_type {net_type!r}; {hint}(any of torchvision.models.list_models(module=torchvision.models))"
    )


def _input_size_kwargs(name: str, input_size) -> dict:
    if input_size is None:
        return {}
    sizes = [input_size] if isinstance(input_size, int) else list(input_size)
    width, height = sizes[0], sizes[-1]
    if name.startswith("vit_"):
        if width != height:
            raise ConfigError(f"{name} needs a square input_size, got {input_size}; use e.g. [224, 224]")
        return {"image_size": width}
    if name == "maxvit_t":
        return {"input_size": (height, width)}
    return {}


def _torchvision_weights_file(name: str, tv) -> str:
    """The path of torchvision's default weights for ``name``, downloading them if needed."""
    url = tv.get_model_weights(name).DEFAULT.url
    folder = os.path.join(torch.hub.get_dir(), "checkpoints")
    path = os.path.join(folder, os.path.basename(url))
    if os.path.isfile(path):
        return path
    logger.info("downloading %s to %s", url, path)
    try:
        _download(url, path)
    except OSError as e:
        raise ConfigError(
            f"pretrained=True: cannot download {url} ({getattr(e, 'reason', None) or e}); "
            f"put {os.path.basename(url)} in {folder}, or pass pretrained=<weights file> or pretrained=False"
        ) from None
    return path


def _download(url: str, path: str) -> None:
    # A timeout on every socket operation: offline machines fail in seconds instead of hanging.
    # Written atomically, so an interrupted download leaves no corrupt file.
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, \
            atomic_write(path, binary=True) as stream:
        shutil.copyfileobj(response, stream)


def _load_pretrained(model: nn.Module, path: str, name: str) -> None:
    from ..checkpoint.weights import load_weights

    report = load_weights(model, path)
    # Old torchvision files predate BatchNorm's num_batches_tracked; it starts at 0 either way.
    missing = [k for k in report["missing"] if not k.endswith("num_batches_tracked")]
    if missing:
        raise CheckpointError(
            f"{path} lacks {len(missing)} of {name}'s weights (e.g. {missing[0]}); give a file saved from {name}"
        )
