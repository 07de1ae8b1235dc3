"""Samplers whose order is a function of (seed, epoch, rank), so that runs shard over processes and resume exactly.

The rank is the data-parallel rank (:func:`~basetrainer.distributed.comm.get_data_parallel_rank`): the global rank,
or under a device mesh the place among the processes that see different data. The epoch's order is
:func:`~basetrainer.data.epoch_order.epoch_order`'s, a view computed a block at a time: a rank's share and a
resumed rank's rest are views of it, never copies of the whole order. A dataset may give its own epoch order with
``epoch_permutation(seed, epoch)`` (shards: a few shards at a time, see :mod:`basetrainer.data.streaming.order`)
and hear of each epoch with ``sampler_epoch(seed, epoch)``."""
import math

import torch
from torch.utils.data import DistributedSampler, Sampler

from ..distributed import comm
from .epoch_order import Order, epoch_order


class TrainSampler(DistributedSampler):
    """``DistributedSampler`` (also for one process) that can start part-way into an epoch.

    The permutation depends only on ``seed`` and the epoch, as in torch's sampler, so
    every rank agrees on it and a resumed run sees the same order. ``set_epoch`` also
    reseeds ``worker_generator``, the generator the DataLoader draws its workers' seeds
    from, so that augmentation in workers is reproducible per epoch and per rank.
    """

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        num_replicas = comm.get_data_parallel_world_size() if num_replicas is None else num_replicas
        rank = comm.get_data_parallel_rank() if rank is None else rank
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
        self.worker_generator = torch.Generator()
        self._skip = 0
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        self.worker_generator.manual_seed(_mix(self.seed, epoch, self.rank))
        sampler_epoch = getattr(self.dataset, "sampler_epoch", None)
        if sampler_epoch is not None:  # before the epoch's workers start, which copy the dataset
            sampler_epoch(self.seed, epoch)

    def skip(self, num_samples: int) -> None:
        """Leave out the first ``num_samples`` indices of this rank's next pass only."""
        self._skip = num_samples

    def __iter__(self):
        skip, self._skip = self._skip, 0
        return iter(self.share(skip))

    def share(self, skip: int = 0) -> Order:
        """This rank's indices of the epoch after the first ``skip`` of its own, as a view of the epoch's order.

        The ranks took the first ``skip * num_replicas`` indices of the epoch's order; the rest is shared out
        again. With as many ranks as before that is this rank's share less its first ``skip``; after an elastic
        resume it still neither repeats nor leaves out a sample."""
        return self.epoch_order()[skip * self.num_replicas:][self.rank::self.num_replicas]

    def epoch_order(self) -> Order:
        """The epoch's whole order, padded as ``DistributedSampler`` pads it (or cut, with ``drop_last``): rank r's
        share is ``[r::num_replicas]``. The same order as ``DistributedSampler``'s for a dataset without its own."""
        return epoch_order(self.dataset, self.seed, self.epoch, self.shuffle).padded(self.total_size)

    def __len__(self) -> int:
        return self.num_samples


class StreamSampler(Sampler):
    """An endless stream of indices for step-based training (``max_iters``): pass after pass
    over the dataset, each pass shuffled by ``(seed, pass)`` and sharded by global rank as
    :class:`TrainSampler` shards an epoch (the shape of detectron2's TrainingSampler).

    It has no length, so a loader over it is one endless epoch that ``max_iters`` ends.
    ``skip(n)`` starts the next iteration ``n`` indices into this rank's stream: a
    resumed run continues the same sequence, whichever pass it was in.
    """

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0):
        self.dataset, self.dataset_len = dataset, len(dataset)
        self.num_replicas = comm.get_data_parallel_world_size() if num_replicas is None else num_replicas
        self.rank = comm.get_data_parallel_rank() if rank is None else rank
        self.shuffle, self.seed = shuffle, seed
        self.per_rank = math.ceil(self.dataset_len / self.num_replicas)  # padded, as DistributedSampler pads
        self.worker_generator = torch.Generator().manual_seed(_mix(seed, 0, self.rank))
        self._start = 0

    def set_epoch(self, epoch: int) -> None:
        """Nothing to do: the stream moves on to the next pass by itself."""

    def skip(self, num_samples: int) -> None:
        self._start = num_samples

    def __iter__(self):
        start, self._start = self._start, 0
        pass_index, offset = divmod(start, self.per_rank)
        while True:
            yield from self._shard(pass_index)[offset:]
            pass_index, offset = pass_index + 1, 0

    def _shard(self, pass_index) -> Order:
        order = epoch_order(self.dataset, self.seed, pass_index, self.shuffle)
        padded = order.padded(self.per_rank * self.num_replicas)  # repeats the start, as DistributedSampler
        return padded[self.rank::self.num_replicas]


class EvalSampler(Sampler):
    """Shards a dataset over ranks without padding: every sample is seen exactly once.

    Rank ``r`` takes indices ``r, r + world, r + 2*world, ...``; shards differ in length
    by at most one, which is fine for evaluation (no collective runs per batch).
    """

    def __init__(self, dataset, num_replicas=None, rank=None):
        self.dataset_len = len(dataset)
        self.num_replicas = comm.get_data_parallel_world_size() if num_replicas is None else num_replicas
        self.rank = comm.get_data_parallel_rank() if rank is None else rank

    def __iter__(self):
        return iter(range(self.rank, self.dataset_len, self.num_replicas))

    def __len__(self) -> int:
        return len(range(self.rank, self.dataset_len, self.num_replicas))


def find_sampler(loader):
    """The index sampler behind ``loader`` (also through a batch sampler), or None."""
    sampler = getattr(loader, "sampler", None)
    batch_sampler = getattr(loader, "batch_sampler", None)
    if batch_sampler is not None and hasattr(batch_sampler, "sampler") and not isinstance(
        sampler, (DistributedSampler, EvalSampler)
    ):
        sampler = batch_sampler.sampler
    return sampler


def _mix(seed: int, epoch: int, rank: int) -> int:
    """A 63-bit seed that differs for every (seed, epoch, rank)."""
    return (seed * 1_000_003 + epoch * 7_919 + rank * 104_729 + 0x5EED) % (2**63 - 1)
