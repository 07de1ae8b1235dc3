"""Ray Train's torch backend with gloo on the interface between the machines (imported only once Ray is).

Ray Train makes the workers' process group itself, at the address of the first worker's node. Left to itself gloo
binds and announces the address of the machine's host name, which Debian and Ubuntu resolve to 127.0.1.1: across
machines the workers then connect to their own loopback ("Connection refused, remote=[127.0.1.1]") and the group
never forms. :class:`GlooAcrossNodes` is Ray's ``TorchConfig`` whose backend first has every worker choose gloo's
interface (:func:`basetrainer.distributed.interfaces.choose_gloo_interface`: the one reaching the first worker's
node, and only when the workers span several nodes), then makes the group as Ray does. Ray has no public hook
between placing the workers and making their group, so the backend extends Ray's own.
"""
from dataclasses import dataclass

import ray
from ray.train.torch import TorchConfig
from ray.train.torch.config import _TorchBackend

from ..distributed.interfaces import choose_gloo_interface


@dataclass
class GlooAcrossNodes(TorchConfig):
    """``TorchConfig`` (its backend, init method and timeout) with gloo on the interface between the nodes."""

    @property
    def backend_cls(self):
        return _GlooAcrossNodesBackend


class _GlooAcrossNodesBackend(_TorchBackend):
    def on_start(self, worker_group, backend_config):
        nodes = worker_group.execute(ray.util.get_node_ip_address)
        worker_group.execute(_choose_interface, nodes[0], len(set(nodes)) > 1)
        super().on_start(worker_group, backend_config)


def _choose_interface(first_node, several_nodes):
    """In a worker: sets ``GLOO_SOCKET_IFNAME`` and says so in the worker's output (which Ray relays to the driver)."""
    words = choose_gloo_interface(first_node, several_nodes)
    if words:
        print(words, flush=True)
