"""Model weights in checkpoint files: taking them out of whatever holds them, and loading them into a model."""
import torch

from ..errors import CheckpointError
from ..parallel.base import unwrap_model
from ..utils.log import get_logger
from .files import load_checkpoint

logger = get_logger()

# Prefixes that wrappers add to state_dict keys: DataParallel/DDP and torch.compile.
_WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def model_state_dict(model: torch.nn.Module) -> dict:
    """The model's weights without wrapper prefixes, on the CPU."""
    return {k: v.detach().cpu() for k, v in unwrap_model(model).state_dict().items()}


def extract_model_state(obj) -> dict:
    """The model weights in anything we may be handed: our checkpoint, ``{"state_dict": ...}``,
    or a bare state_dict; ``module.``/``_orig_mod.`` prefixes removed."""
    if isinstance(obj, dict):
        for key in ("model", "state_dict", "model_state_dict"):
            if isinstance(obj.get(key), dict):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError("the file holds no model weights (no tensors under 'model' or 'state_dict')")
    return {strip_prefixes(k): v for k, v in obj.items()}


def strip_prefixes(key: str) -> str:
    changed = True
    while changed:
        changed = False
        for prefix in _WRAPPER_PREFIXES:
            if key.startswith(prefix):
                key, changed = key[len(prefix):], True
    return key


def load_weights(model: torch.nn.Module, source, strict: bool = False, name: str = None) -> dict:
    """Loads weights into ``model`` for fine-tuning; returns what was skipped and missing.

    ``source`` is a path or a dict (checkpoint or state_dict; ``name`` then says where it
    came from in messages). Layers whose shape differs (a new head for another
    num_classes) are skipped with one warning naming them, unless ``strict``, which
    refuses any mismatch.
    """
    name = name or (source if isinstance(source, str) else "the given state_dict")
    state = extract_model_state(load_checkpoint(source) if isinstance(source, str) else source)
    target = unwrap_model(model)
    own = target.state_dict()
    mismatched, missing, unexpected = _compare(own, state)
    if strict and (mismatched or unexpected or missing):
        raise CheckpointError(
            f"{name} does not fit the model: {_describe(mismatched, 'shape differs', state, own)}"
            f"{_describe(missing, 'missing')}{_describe(unexpected, 'unexpected')}"
            f"; build the model that wrote it, or load with strict: false"
        )
    if mismatched:
        logger.warning("finetune: skipped %d layer(s) whose shape differs from %s: %s",
                       len(mismatched), name, _describe(mismatched, "shape differs", state, own))
    usable = {k: v for k, v in state.items() if k in own and k not in mismatched}
    target.load_state_dict(usable, strict=False)
    return {"skipped": mismatched, "missing": missing, "unexpected": unexpected}


def check_shapes(model: torch.nn.Module, state: dict, name: str, left_out=()) -> None:
    """Raises a CheckpointError naming the layers when ``state`` is not exactly ``model``'s weights (less the keys
    ``left_out``, which a checkpoint of the weights that train does not hold)."""
    own = unwrap_model(model).state_dict()
    own = {key: value for key, value in own.items() if strip_prefixes(key) not in left_out} if left_out else own
    mismatched, missing, unexpected = _compare(own, state)
    if mismatched or missing or unexpected:
        raise CheckpointError(
            f"{name} was written by another model: {_describe(mismatched, 'shape differs', state, own)}"
            f"{_describe(missing, 'missing')}{_describe(unexpected, 'unexpected')}"
            f"; resume with the same net_type and num_classes, or use finetune to load weights only"
        )


def _compare(own: dict, state: dict):
    """(keys whose shape differs, keys ``state`` lacks, keys ``own`` lacks)."""
    mismatched = [k for k, v in state.items() if k in own and own[k].shape != v.shape]
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    return mismatched, missing, unexpected


def _describe(keys, what, state=None, own=None) -> str:
    if not keys:
        return ""
    shown = []
    for k in keys[:5]:
        if state is not None and own is not None:
            shown.append(f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}")
        else:
            shown.append(k)
    more = f" and {len(keys) - 5} more" if len(keys) > 5 else ""
    return f"[{what}: {', '.join(shown)}{more}] "


def is_model_and_optimizer_file(obj) -> bool:
    """Whether ``obj`` is laid out as the earlier library's ``model_optimizer.pth``: exactly
    ``{"epoch", "model", "optimizer"}`` (a training checkpoint of ours holds more), its ``model``
    the training weights that the optimizer state goes with."""
    return isinstance(obj, dict) and set(obj) == {"epoch", "model", "optimizer"} and isinstance(obj["model"], dict)


def read_model_weights(path: str, map_location="cpu") -> dict:
    """The model weights in the file ``path``: a training checkpoint, a best or final model file, or a
    bare state_dict (with or without ``module.`` prefixes); read with ``weights_only=True``."""
    return extract_model_state(load_checkpoint(path, map_location=map_location))
