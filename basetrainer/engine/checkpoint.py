"""Checkpoint files: atomic writes, loads that never run code, and the pieces of a training state.

A checkpoint holds only tensors, numbers, strings, lists and dicts, so that
``torch.load(..., weights_only=True)`` reads it and a file that would need arbitrary
unpickling is refused.
"""
import errno
import os
import pickle
import random

import numpy as np
import torch

from ..errors import CheckpointError
from ..utils.file_utils import atomic_write
from ..utils.log import get_logger
from .strategies import unwrap_model

logger = get_logger()

# Prefixes that wrappers add to state_dict keys: DataParallel/DDP and torch.compile.
_WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def save_checkpoint(obj, path: str) -> str:
    """Writes ``obj`` to ``path`` atomically and durably: a crash mid-write leaves any previous file intact."""
    try:
        with atomic_write(path, binary=True, durable=True) as stream:
            torch.save(obj, stream)
    except OSError as e:
        hint = "free some disk space" if e.errno == errno.ENOSPC else "check the folder's permissions and space"
        raise CheckpointError(
            f"could not write checkpoint {path}: {e.strerror or e}; {hint} (the previous file is intact)"
        ) from None
    return path


def load_checkpoint(path: str, map_location="cpu") -> dict:
    """Reads a checkpoint or state_dict file with ``weights_only=True``, or raises a one-line CheckpointError."""
    if not os.path.isfile(path):
        raise CheckpointError(f"no checkpoint at {path}: check the path (or use resume: auto)")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "weights only" in str(e).lower() or "weights_only" in str(e).lower():
            raise CheckpointError(
                f"refusing to load {path}: it needs arbitrary code to unpickle ({_unsafe_detail(e)}); "
                f"only load files you trust, with torch.load(weights_only=False) yourself"
            ) from None
        raise CheckpointError(f"{path} is not a readable checkpoint ({first}); use another file") from None
    except Exception as e:  # noqa: BLE001 - garbage bytes make the unpickler fail in arbitrary ways
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(
            f"{path} is truncated or not a checkpoint ({detail}); resume from an earlier checkpoint"
        ) from None


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


def check_shapes(model: torch.nn.Module, state: dict, name: str) -> None:
    """Raises a CheckpointError naming the layers when ``state`` is not exactly ``model``'s weights."""
    own = unwrap_model(model).state_dict()
    mismatched, missing, unexpected = _compare(own, state)
    if mismatched or missing or unexpected:
        raise CheckpointError(
            f"{name} was written by another model: {_describe(mismatched, 'shape differs', state, own)}"
            f"{_describe(missing, 'missing')}{_describe(unexpected, 'unexpected')}"
            f"; resume with the same net_type and num_classes, or use finetune to load weights only"
        )


def get_rng_state() -> dict:
    """This process's python, numpy, torch and CUDA generator states, in checkpoint-safe types."""
    version, internal, gauss = random.getstate()
    np_key, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    state = {
        "python": [version, list(internal), gauss],
        "numpy": [np_key, torch.from_numpy(np_keys.astype(np.int64)), int(np_pos), int(np_has_gauss), float(np_gauss)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_key, np_keys, np_pos, np_has_gauss, np_gauss = state["numpy"]
    np.random.set_state((np_key, np_keys.numpy().astype(np.uint32), np_pos, np_has_gauss, np_gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


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


def _unsafe_detail(error: Exception) -> str:
    for line in str(error).splitlines():
        if "Unsupported global" in line or "GLOBAL" in line:
            return line.strip().rstrip(".")
    return "unsupported object"
