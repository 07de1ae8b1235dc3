"""basetrainer: a PyTorch training engine.

Subclass :class:`basetrainer.EngineTrainer`, fill in its ``build_*`` hooks, and start it
with :func:`basetrainer.launch`. Importing this package loads nothing heavy: the names
below are resolved on first use. It also installs the import hook that maps the old
import paths (see :mod:`basetrainer.old_paths`).
"""
from . import old_paths as _old_paths

__version__ = "2.0.0"

_LAZY = {
    "EngineTrainer": "basetrainer.engine.trainer",
    "launch": "basetrainer.distributed.launch",
    "Callback": "basetrainer.engine.events",
    "RunState": "basetrainer.engine.state",
}

__all__ = ["__version__", *_LAZY]

_old_paths.install()


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'basetrainer' has no attribute {name!r}")
