"""timm backbones by name: ``net_type: timm/<name>`` is ``timm.create_model(<name>)`` with a ``num_classes``-way head.

timm is an extra (``pip install "basetrainer[timm]"``), imported only when a ``timm/`` name is used.
``pretrained: true`` loads timm's pretrained weights for the model through timm itself (fetched from the
Hugging Face hub or the model's address into their cache, read from the cache after that); a file of such weights,
``pretrained: <path>``, goes through the same loader, offline. Each model's pretrained configuration says the
input size and the normalisation it was trained with: :func:`timm_data_defaults` gives them to a config that
leaves ``input_size``, ``rgb_mean`` and ``rgb_std`` unset.
"""
import contextlib
import difflib
import importlib
import importlib.util
import logging
import os

from torch import nn

from ..errors import CheckpointError, ConfigError

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


def build_timm_model(net_type: str, num_classes: int, input_size=None, pretrained=False) -> nn.Module:
    """``timm.create_model`` with ``num_classes`` outputs. A model made for one input size (a ViT's patch grid and
    position embeddings) is made for ``input_size`` (``[width, height]``).

    ``pretrained``: False, random weights; True, timm's pretrained weights of the model's default tag, which timm
    fetches (a machine that cannot reach them gets one line naming the model and the file to pass instead); a
    path, a file of weights (timm's ``model.safetensors`` or ``pytorch_model.bin`` of the model, or a state_dict
    saved from it), read and loaded by timm's own loader as timm's pretrained configuration overlaid with it
    (``pretrained_cfg_overlay``): timm adapts what it adapts for its own weights (a ViT's position embeddings to
    ``input_size``), and the classifier is kept when it has ``num_classes`` rows, else left fresh."""
    timm = _import_timm(net_type)
    name = timm_model_name(net_type)
    kwargs = {}
    if input_size is not None and timm.models.get_pretrained_cfg(name).fixed_input_size:
        width, height = input_size
        kwargs["img_size"] = (height, width)
    if pretrained and pretrained is not True:
        kwargs["pretrained_cfg_overlay"] = _local_weights(timm, name, os.fspath(pretrained), net_type)
    try:
        with _quiet_loader() if "pretrained_cfg_overlay" in kwargs else contextlib.nullcontext():
            model = timm.create_model(name, pretrained=bool(pretrained), num_classes=num_classes, **kwargs)
    except OSError as error:  # the hub's or the address's download, and no copy in their cache
        raise ConfigError(f"{net_type}: pretrained=true cannot fetch timm's weights for it "
                          f"({_first_sentence(error)}); on a machine that reaches them save "
                          f"timm.create_model({name!r}, pretrained=True).state_dict() with torch.save, or take "
                          f"model.safetensors of hf-hub:{_hub_id(timm, name)}, and pass pretrained=<that file>; or "
                          f"pretrained=false") from None
    except RuntimeError as error:  # no weights for this model, or a file whose tensors are not the model's
        where = f"pretrained={pretrained}" if pretrained is not True else "pretrained=true"
        raise CheckpointError(f"{net_type}: {where}: {_first_line(error)}") from None
    except (ValueError, AssertionError, TypeError) as error:
        raise ConfigError(f"{net_type} cannot be built for input_size {input_size}: {_first_line(error)}") from None
    if "pretrained_cfg_overlay" in kwargs:
        _check_all_loaded(model, kwargs["pretrained_cfg_overlay"]["state_dict"], name, pretrained, net_type)
    return model


def _check_all_loaded(model: nn.Module, state: dict, name: str, path, net_type: str) -> None:
    """timm loads a file's weights leniently once it drops a classifier of another size; a file that lacks some of
    the model's other weights (another model's) is refused here, as a torchvision model's is."""
    timm = _import_timm(net_type)
    classifier = timm.models.get_pretrained_cfg(name).classifier
    heads = (classifier,) if isinstance(classifier, str) else tuple(classifier or ())
    missing = [key for key in model.state_dict() if key not in state and not key.endswith("num_batches_tracked")
               and not any(key.startswith(f"{head}.") for head in heads)]
    if missing:
        raise CheckpointError(f"pretrained={path} lacks {len(missing)} of {net_type}'s weights (e.g. {missing[0]}); "
                              f"give a file of {net_type}'s weights")


def _local_weights(timm, name: str, path: str, net_type: str) -> dict:
    """The ``pretrained_cfg_overlay`` that makes timm load the weights of ``path`` (read by timm's reader: safetensors,
    or torch's without running code, EMA weights when the file has them): its tensors, and the classes its
    classifier was trained for, so that timm keeps a classifier of the model's size and drops another."""
    if not os.path.isfile(path):
        raise ConfigError(f"pretrained={path!r}: no such file; give a weights file of {net_type}, true or false")
    try:
        state = timm.models.load_state_dict(path)
    except Exception as error:  # not a weights file: a pickle that needs code, a damaged or foreign file
        raise CheckpointError(f"pretrained={path}: cannot read weights from it ({type(error).__name__}: not a "
                              f"safetensors file, nor a torch file of tensors only); give a file of {net_type}'s "
                              f"weights") from None
    classifier = timm.models.get_pretrained_cfg(name).classifier
    classifiers = (classifier,) if isinstance(classifier, str) else tuple(classifier or ())
    rows = [state[f"{head}.weight"].shape[0] for head in classifiers if f"{head}.weight" in state]
    overlay = {"state_dict": state}
    if rows:
        overlay["num_classes"] = rows[0]
    return overlay


@contextlib.contextmanager
def _quiet_loader():
    """timm's loader lists every key it did not place, which for a file of another model is all of them;
    :func:`_check_all_loaded` says it in one line instead."""
    builder = logging.getLogger("timm.models._builder")
    level = builder.level
    builder.setLevel(logging.ERROR)
    try:
        yield
    finally:
        builder.setLevel(level)


def _hub_id(timm, name: str) -> str:
    return timm.models.get_pretrained_cfg(name).hf_hub_id or f"timm/{name}"


def _first_line(error) -> str:
    return (str(error).strip() or type(error).__name__).splitlines()[0]


def _first_sentence(error) -> str:
    return _first_line(error).split(". ")[0].rstrip(".")


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
