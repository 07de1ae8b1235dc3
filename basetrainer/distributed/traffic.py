"""What a process sends to the others: all-reduce calls and bytes, and broadcast bytes, counted while a
:class:`~basetrainer.distributed.traffic.Traffic` is open.

For measuring, not for training runs: ``bench/comm.py`` and the tests of DDP's communication
(:mod:`basetrainer.parallel.communication`) use it. It wraps ``torch.distributed.all_reduce``,
through which go the all-reduces of DDP's communication hooks (torch's ``allreduce_hook``,
``bf16_compress_hook``, ``powerSGD_hook``, ``post_localSGD_hook``), the model averaging of
local SGD and basetrainer's own collectives, and ``torch.distributed._broadcast_coalesced``,
through which DDP broadcasts rank 0's buffers before each forward. DDP's built-in gradient
all-reduce (no hook registered) runs in C++ and passes neither: :func:`count_gradient_buckets`
registers torch's ``allreduce_hook`` on such a model, which torch documents as doing what the
built-in does, through ``all_reduce``. A byte is an element of the tensor handed over times
its size (what one rank contributes, whatever the algorithm moves on the wire).
"""
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks


class Traffic:
    """Counts, in this process, the all-reduces (``all_reduce_calls``, ``all_reduce_bytes``) and the
    buffer broadcasts (``broadcast_bytes``) made while it is open (``with Traffic() as traffic:``)."""

    def __init__(self):
        self.all_reduce_calls = self.all_reduce_bytes = self.broadcast_bytes = 0
        self._originals = None

    def __enter__(self):
        self._originals = dist.all_reduce, dist._broadcast_coalesced
        all_reduce, broadcast_coalesced = self._originals

        def counted_all_reduce(tensor, *args, **kwargs):
            self.all_reduce_calls += 1
            self.all_reduce_bytes += tensor.numel() * tensor.element_size()
            return all_reduce(tensor, *args, **kwargs)

        def counted_broadcast(process_group, tensors, *args, **kwargs):
            self.broadcast_bytes += sum(tensor.numel() * tensor.element_size() for tensor in tensors)
            return broadcast_coalesced(process_group, tensors, *args, **kwargs)

        dist.all_reduce, dist._broadcast_coalesced = counted_all_reduce, counted_broadcast
        return self

    def __exit__(self, *exc_info) -> None:
        dist.all_reduce, dist._broadcast_coalesced = self._originals

    def totals(self) -> tuple:
        """``(all_reduce_calls, all_reduce_bytes, broadcast_bytes)`` so far."""
        return self.all_reduce_calls, self.all_reduce_bytes, self.broadcast_bytes


def count_gradient_buckets(ddp_model) -> None:
    """Makes a DDP model without a communication hook all-reduce its gradient buckets through
    ``torch.distributed.all_reduce`` (torch's ``allreduce_hook``, equivalent to DDP's built-in one),
    so that a :class:`Traffic` counts them. Call it before the first backward."""
    ddp_model.register_comm_hook(None, default_hooks.allreduce_hook)
