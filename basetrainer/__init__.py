"""basetrainer: a PyTorch training engine.

Subclass :class:`basetrainer.EngineTrainer`, fill in its ``build_*`` hooks, and start it
with :func:`basetrainer.launch`. Importing this package loads nothing heavy: the names
below are resolved on first use. It also installs the import hook that maps the old
import paths (see :mod:`basetrainer.old_paths`).
"""
from . import old_paths as _old_paths
from .utils.lazy import lazy_attributes, names_of

__version__ = "2.0.0"
# The project's public address (its repository, https://...), once it has one: the documentation's Repository
# and Issues links and its pip install "git+..." line, and setup.py's project URLs. Empty, none of them exists.
__url__ = ""

_LAZY = {
    "basetrainer.engine.trainer": ("EngineTrainer",),
    "basetrainer.distributed.launch": ("launch",),
    "basetrainer.engine.events": ("Callback", "Event"),
    "basetrainer.engine.state": ("RunState",),
}

__all__ = ["__version__", *names_of(_LAZY)]

_old_paths.install()

__getattr__ = lazy_attributes(__name__, _LAZY)
