"""The lighthouse of a local job's replica groups: torchft's server, run by the supervising process on a free port.

The lighthouse is where the replica groups meet: each group's torchft Manager asks it, before every step, which
groups are alive (the quorum), and a group it has not heard from for ``heartbeat_ms`` drops out. For
``fault_tolerance.lighthouse: auto`` the supervisor (:mod:`basetrainer.distributed.replica_groups`) serves one
itself, through the Python binding torchft ships (``torchft._torchft.LighthouseServer``), bound to a port the system
gives it, so that several jobs on one machine never collide; given an address instead, the job joins that
lighthouse and starts none.

torchft is an extra (``pip install "basetrainer[torchft]"``), imported only when a lighthouse is started.
"""
import contextlib
import importlib
import importlib.util
import os
from collections.abc import Mapping

from ..errors import ConfigError
from ..utils.log import get_logger

logger = get_logger()

TORCHFT_EXTRA = 'pip install "basetrainer[torchft]"'


@contextlib.contextmanager
def serving_lighthouse(settings: Mapping):
    """The lighthouse's address (``http://host:port``) while inside, for the ``fault_tolerance`` ``settings``.

    With ``lighthouse: auto``, a lighthouse this process serves on all its addresses (``[::]``) and a free port,
    taking ``min_replicas``, ``join_timeout_ms`` and ``heartbeat_ms`` from the settings; it is shut down on leaving,
    whatever happens. Otherwise the address given (``http://`` added where it names no scheme), and nothing started.
    """
    address = settings["lighthouse"]
    if address != "auto":
        yield lighthouse_url(address)
        return
    server = torchft_module("torchft._torchft").LighthouseServer(
        bind="[::]:0", min_replicas=int(settings["min_replicas"]), join_timeout_ms=int(settings["join_timeout_ms"]),
        heartbeat_timeout_ms=int(settings["heartbeat_ms"]))
    try:
        logger.info("lighthouse of the replica groups at %s", server.address())
        yield server.address()
    finally:
        server.shutdown()


def lighthouse_url(address: str) -> str:
    """A lighthouse's address as torchft takes it: ``host:port`` gets ``http://``."""
    return address if "://" in address else f"http://{address}"


def torchft_module(name: str):
    """torchft's module ``name``; where torchft is not installed, a one-line ConfigError naming the pip command.

    torchft's own log lines (its quorum's and commits', at every step) are kept to warnings unless ``RUST_LOG``
    says otherwise, here and in the processes this one starts.
    """
    if importlib.util.find_spec("torchft") is None:
        raise ConfigError(f"fault_tolerance needs torchft: {TORCHFT_EXTRA}")
    os.environ.setdefault("RUST_LOG", "warn")
    return importlib.import_module(name)
