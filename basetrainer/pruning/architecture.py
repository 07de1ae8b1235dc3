"""A model's layer widths as plain data, and how to give a freshly built model those widths.

Pruning narrows layers, so a pruned checkpoint no longer fits the model that
``build_model`` builds. A checkpoint therefore stores ``architecture_spec(model)`` (under
``"architecture"``), and loading calls ``apply_architecture_spec`` on the fresh model
before ``load_state_dict``. Only plain torch is used here: loading a pruned checkpoint
must not need the pruning backend that made it.

A spec maps each layer's name to its type, its width attributes and the shapes of its
own parameters and buffers::

    {"layer1.0.conv1": {"type": "Conv2d", "in_channels": 32, "out_channels": 32, "groups": 1,
                        "tensors": {"weight": [32, 32, 3, 3]}}, ...}

Values are ints, strings and lists only, so a spec survives JSON and
``torch.load(weights_only=True)``.
"""
import torch
from torch import nn

from ..errors import CheckpointError

# The attributes that channel pruning changes; every other setting of a layer (kernel
# size, stride, eps, ...) is the same in the freshly built model.
WIDTH_ATTRIBUTES = (
    "in_channels",
    "out_channels",
    "groups",
    "num_features",
    "in_features",
    "out_features",
    "normalized_shape",
    "num_channels",
    "num_parameters",
    "num_embeddings",
    "embedding_dim",
)


def architecture_spec(model: nn.Module) -> dict:
    """Every layer's width attributes and tensor shapes (see the module docstring)."""
    spec = {}
    for name, module in unwrap_model(model).named_modules():
        tensors = {
            tensor_name: list(tensor.shape)
            for tensor_name, tensor in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]
        }
        if not tensors:
            continue
        entry = {"type": type(module).__name__}
        for attribute in WIDTH_ATTRIBUTES:
            value = getattr(module, attribute, None)
            if isinstance(value, int):
                entry[attribute] = value
            elif isinstance(value, tuple) and all(isinstance(v, int) for v in value):
                entry[attribute] = list(value)
        entry["tensors"] = tensors
        spec[name] = entry
    return spec


def apply_architecture_spec(model: nn.Module, spec: dict) -> nn.Module:
    """Reshapes ``model`` in place to the widths in ``spec`` and returns it.

    ``model`` is a freshly built, unpruned model of the class the spec was taken from;
    afterwards ``model.load_state_dict(pruned_state_dict)`` works. Parameters are new
    objects, so build the optimizer afterwards, and apply the spec before
    DistributedDataParallel wraps the model (DDP fixes its buckets' shapes when it wraps).
    """
    if isinstance(model, nn.parallel.DistributedDataParallel):
        raise CheckpointError(
            "a pruned architecture cannot be applied to a model already wrapped in DistributedDataParallel: "
            "apply it before build_model_parallel"
        )
    target = unwrap_model(model)
    modules = dict(target.named_modules())
    for name, entry in spec.items():
        module = modules.get(name)
        if module is None or type(module).__name__ != entry["type"]:
            found = "missing" if module is None else type(module).__name__
            raise CheckpointError(
                f"the saved pruned architecture does not fit this model: layer {name!r} is {entry['type']} "
                f"in the checkpoint but {found} here; build the same network the checkpoint was trained with"
            )
        for attribute in WIDTH_ATTRIBUTES:
            if attribute in entry:
                value = entry[attribute]
                setattr(module, attribute, tuple(value) if isinstance(value, list) else value)
        for tensor_name, shape in entry["tensors"].items():
            _resize_tensor(module, name, tensor_name, shape)
    target.pruning_spec = spec
    return model


@torch.no_grad()
def _resize_tensor(module: nn.Module, module_name: str, tensor_name: str, shape: list) -> None:
    old = getattr(module, tensor_name, None)
    if old is None or old.dim() != len(shape):
        raise CheckpointError(
            f"the saved pruned architecture does not fit this model: {module_name}.{tensor_name} "
            f"should have {len(shape)} dimensions; build the same network the checkpoint was trained with"
        )
    if list(old.shape) == list(shape):
        return
    # The leading values are kept rather than left uninitialised: load_state_dict
    # overwrites them, but non-persistent buffers are not in a state_dict.
    fresh = old.new_zeros(shape)
    overlap = tuple(slice(0, min(a, b)) for a, b in zip(old.shape, shape))
    fresh[overlap] = old[overlap]
    if isinstance(old, nn.Parameter):
        fresh = nn.Parameter(fresh, requires_grad=old.requires_grad)
    setattr(module, tensor_name, fresh)


def unwrap_model(model: nn.Module) -> nn.Module:
    """The model inside a DataParallel or DistributedDataParallel wrapper (or ``model`` itself)."""
    if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
        return model.module
    return model
