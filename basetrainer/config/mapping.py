"""``Config``, the dict every configuration is held in, and turning it back into plain data."""
import argparse
import numbers
from collections.abc import Mapping


class Config(dict):
    """A dict whose keys are also attributes: ``cfg.lr`` is ``cfg["lr"]``.

    Nested dicts, also those inside lists, become ``Config`` when stored. A missing
    attribute raises AttributeError, so ``getattr(cfg, "key", default)`` works. Keys named
    like dict methods (``items``, ``copy``...) are reached with ``cfg["items"]``.

        >>> from basetrainer.config import Config
        >>> cfg = Config(lr=0.1, target={"metric": "Acc", "value": 98})
        >>> cfg.lr, cfg.target.metric, cfg["target"]["value"]
        (0.1, 'Acc', 98)
        >>> cfg.num_epochs = 5
        >>> getattr(cfg, "max_iters", None) is None
        True
    """

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.update(*args, **kwargs)

    def __getattr__(self, name):
        return self[_existing_key(self, name)]

    def __setattr__(self, name, value):
        self[name] = value

    def __delattr__(self, name):
        del self[_existing_key(self, name)]

    def __setitem__(self, key, value):
        super().__setitem__(key, _wrap(value))

    # dict's own update/setdefault bypass __setitem__, so nested dicts would stay plain.
    def update(self, *args, **kwargs):
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def copy(self):
        return Config(self)

    def to_dict(self):
        """Plain nested dicts and lists, safe for YAML, JSON and checkpoints (other values become str)."""
        return to_plain(self)


def _existing_key(cfg, name):
    # AttributeError, not KeyError: getattr(cfg, name, default), hasattr and pickle rely on it.
    if name not in cfg:
        raise AttributeError(f"config has no key {name!r}")
    return name


def _wrap(value):
    if isinstance(value, Config):
        return value
    if isinstance(value, Mapping):
        return Config(value)
    if type(value) in (list, tuple):
        return type(value)(_wrap(item) for item in value)
    return value


def to_plain(value):
    """``value`` as nested dicts and lists of str, int, float, bool and None; other objects become str."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):  # also numpy integers, which YAML cannot write
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, Mapping):
        return {key if isinstance(key, (str, int)) else str(key): to_plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(item) for item in value]
    if isinstance(value, argparse.Namespace):
        return to_plain(vars(value))
    return str(value)


def deep_merge(base, extra):
    """A new dict: ``base`` updated by ``extra``, where both hold a mapping under a key, merged key by key."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def option(cfg, key, default):
    """``cfg[key]`` (or ``cfg.key``), or ``default`` when it is missing or None."""
    value = cfg.get(key, default) if isinstance(cfg, dict) else getattr(cfg, key, default)
    return default if value is None else value
