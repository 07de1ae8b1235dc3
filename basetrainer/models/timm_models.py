"""timm backbones by name: ``net_type: timm/<name>`` is ``timm.create_model(<name>)`` with a ``num_classes``-way head.

timm is an extra (``pip install "basetrainer[timm]"``), imported only when a ``timm/`` name is used. Its
models are built with random weights, offline; ``pretrained`` weights come from a local file, as for
torchvision's (:func:`~basetrainer.models.build_models.get_models`). Each model's pretrained configuration
says the input size and the normalisation it was trained with: :func:`timm_data_defaults` gives them to a
config that leaves ``input_size``, ``rgb_mean`` and ``rgb_std`` unset.
"""
import difflib
import importlib
import importlib.util

from torch import nn

from ..errors import ConfigError

PREFIX = "timm/"
TIMM_EXTRA = 'pip install "basetrainer[timm]"'


def is_timm_name(net_type) -> bool:
    """Whether ``net_type`` names a timm model (``timm/<name>``)."""
    return str(net_type).lower().startswith(PREFIX)


def timm_model_name(net_type: str) -> str:
    """The timm architecture ``timm/<name>`` names (as ``timm.list_models()`` spells it); a one-line ConfigError
    naming close matches when timm has none, or the pip command when timm is not installed."""
    timm = _import_timm(net_type)
    name = str(net_type)[len(PREFIX):]
    if timm.is_model(name):
        return name
    names = timm.list_models()
    close = difflib.get_close_matches(name.lower().replace("-", "_"), names, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(PREFIX + match for match in close)}? " if close else ""
    raise ConfigError(f"unknown net_type {net_type!r}; {hint}(any timm/<name> of timm.list_models())")


def timm_data_defaults(net_type: str) -> dict:
    """``input_size`` (``[width, height]``), ``rgb_mean`` and ``rgb_std`` of the timm model's default pretrained
    configuration: what its weights were trained with, and what its layers expect."""
    timm = _import_timm(net_type)
    config = timm.models.get_pretrained_cfg(timm_model_name(net_type))
    _, height, width = config.input_size
    return {"input_size": [width, height], "rgb_mean": list(config.mean), "rgb_std": list(config.std)}


def build_timm_model(net_type: str, num_classes: int, input_size=None) -> nn.Module:
    """``timm.create_model`` with random weights and ``num_classes`` outputs. A model made for one input size
    (a ViT's patch grid and position embeddings) is made for ``input_size`` (``[width, height]``)."""
    timm = _import_timm(net_type)
    name = timm_model_name(net_type)
    kwargs = {}
    if input_size is not None and timm.models.get_pretrained_cfg(name).fixed_input_size:
        width, height = input_size
        kwargs["img_size"] = (height, width)
    try:
        return timm.create_model(name, pretrained=False, num_classes=num_classes, **kwargs)
    except (ValueError, AssertionError, TypeError) as error:
        first_line = (str(error).strip() or type(error).__name__).splitlines()[0]
        raise ConfigError(f"{net_type} cannot be built for input_size {input_size}: {first_line}") from None


def check_prunable(model: nn.Module, net_type: str) -> None:
    """Channel pruning removes whole channels of each layer; an attention layer splits its channels into heads
    that a reshape then needs whole (timm's ``Attention``: ``qkv`` and ``num_heads``). Such a model is refused in
    one line naming the first attention layer, instead of pruning into a model whose forward fails."""
    for name, module in model.named_modules():
        if hasattr(module, "num_heads") and hasattr(module, "qkv"):
            raise ConfigError(f"use_prune: {net_type} has attention layers ({name}: {type(module).__name__}, "
                              f"{module.num_heads} heads) whose heads channel pruning cannot keep whole; set "
                              f"use_prune: false, or prune a convolutional network (e.g. timm/resnet10t)")


def _import_timm(net_type: str):
    if importlib.util.find_spec("timm") is None:
        raise ConfigError(f"net_type {net_type} needs the timm package: {TIMM_EXTRA}")
    return importlib.import_module("timm")
