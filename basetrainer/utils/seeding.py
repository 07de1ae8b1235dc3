"""Seeding every random number generator a training run draws from."""
import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seeds python, numpy and torch (every device)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def set_env_random_seed(seed: int = 2020) -> None:
    """The earlier library's name of :func:`seed_everything`, with its default seed."""
    seed_everything(seed)
