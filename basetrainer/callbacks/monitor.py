"""Deciding whether a watched value improved: one rule for early stopping and the best-model
choice (they read the value with :func:`basetrainer.utils.published.lookup`)."""
import math

MODES = ("max", "min")


def check_mode(mode: str, owner: str) -> str:
    """``mode`` if it is "max" or "min", else a ValueError naming ``owner``."""
    if mode not in MODES:
        raise ValueError(f"{owner}: mode must be 'max' or 'min', got {mode!r}")
    return mode


def improves(value: float, reference, mode: str = "max", min_delta: float = 0.0) -> bool:
    """Whether ``value`` beats ``reference`` by more than ``min_delta``: higher with ``mode="max"``,
    lower with ``mode="min"``. NaN never improves; anything else beats a ``reference`` of None."""
    if math.isnan(value):
        return False
    if reference is None:
        return True
    return value > reference + min_delta if mode == "max" else value < reference - min_delta
