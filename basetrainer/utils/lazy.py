"""Names a package resolves on first use, so that importing it loads nothing heavy."""
import importlib


def lazy_attributes(package: str, modules: dict):
    """A module ``__getattr__`` for ``package``: ``modules`` maps a module's name to the names it
    holds; the first time one of them is asked for, its module is imported and the name returned."""
    owner = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name):
        if name in owner:
            return getattr(importlib.import_module(owner[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def names_of(modules: dict) -> list:
    """Every name of a ``modules`` table, for ``__all__``."""
    return [name for names in modules.values() for name in names]
