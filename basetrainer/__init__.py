"""basetrainer: a PyTorch training engine.

Subclass :class:`basetrainer.EngineTrainer`, fill in its ``build_*`` hooks, and start it
with :func:`basetrainer.launch`. Importing this package loads nothing heavy: the names
below are resolved on first use.
"""
__version__ = "2.0.0"

_LAZY = {
    "EngineTrainer": "basetrainer.engine.trainer",
    "launch": "basetrainer.engine.launch",
    "Callback": "basetrainer.engine.events",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'basetrainer' has no attribute {name!r}")
