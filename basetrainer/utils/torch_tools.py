"""Old-API helpers: seeding and reading weights written by this library or anyone else."""
from ..engine.checkpoint import extract_model_state, load_checkpoint
from .seeding import seed_everything


def set_env_random_seed(seed: int = 2020) -> None:
    """Seeds python, numpy and torch."""
    seed_everything(seed)


def load_state_dict(path: str, map_location="cpu") -> dict:
    """The model weights in ``path``: our checkpoint, a best/final model file, or a bare state_dict
    (with or without ``module.`` prefixes). Loaded with ``weights_only=True``."""
    return extract_model_state(load_checkpoint(path, map_location=map_location))
