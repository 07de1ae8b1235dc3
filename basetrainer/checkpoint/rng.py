"""Random generator states in checkpoint-safe types, so that a resumed run draws what an uninterrupted one would."""
import random

import numpy as np
import torch


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
