"""Callbacks that a driver outside the trainer adds to every trainer built in this process.

An integration that runs a user's unchanged ``main(cfg)`` in workers of its own (Ray Train's:
:mod:`basetrainer.integrations.ray`) cannot reach the trainer that ``main`` builds. It registers a factory
here around the call, and ``build`` adds a fresh callback from it after the trainer's own callbacks. The
engine knows nothing of who registered it, and a process that registers nothing runs as before.
"""
import contextlib

_FACTORIES = []


@contextlib.contextmanager
def callbacks_added(factory):
    """Within the block, every trainer built adds ``factory()`` to its callbacks."""
    _FACTORIES.append(factory)
    try:
        yield
    finally:
        _FACTORIES.remove(factory)


def added_callbacks() -> list:
    """A fresh callback from each registered factory, in the order they were registered."""
    return [factory() for factory in _FACTORIES]
