"""Deciding whether a watched value improved: one rule for early stopping and the best-model choice."""
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


def lookup(values: dict, key: str):
    """The number at ``key`` in ``values``: ``"Acc"``, or ``"val/Acc"`` for a test set's value
    (``values["val"]["Acc"]``, as several test sets publish them); None when absent."""
    value = values.get(key) if isinstance(values, dict) else None
    if value is None and "/" in key:
        head, rest = key.split("/", 1)
        return lookup(values.get(head), rest) if isinstance(values, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
