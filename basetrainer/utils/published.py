"""Reading the values callbacks publish in ``logs``: one rule for every reader (early stopping, the best
model, a search's reports, the time to target)."""


def lookup(values: dict, key: str):
    """The number at ``key`` in ``values``: ``"Acc"``, or ``"val/Acc"`` for a test set's value
    (``values["val"]["Acc"]``, as several test sets publish them); None when absent."""
    value = values.get(key) if isinstance(values, dict) else None
    if value is None and "/" in key:
        head, rest = key.split("/", 1)
        return lookup(values.get(head), rest) if isinstance(values, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def published_names(values: dict, prefix: str = "") -> list:
    """The names :func:`lookup` finds a number at in ``values``, nested ones as ``"val/Acc"``."""
    names = []
    for name, value in values.items():
        if isinstance(value, dict):
            names += published_names(value, f"{prefix}{name}/")
        elif lookup({name: value}, name) is not None:
            names.append(f"{prefix}{name}")
    return names
