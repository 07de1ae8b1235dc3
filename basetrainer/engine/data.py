"""Data loaders whose order is a function of (seed, epoch, rank), so runs shard and resume exactly."""
import math

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler, SequentialSampler

from ..errors import DataError
from ..utils.log import get_logger
from . import comm

logger = get_logger()


class TrainSampler(DistributedSampler):
    """``DistributedSampler`` (also for one process) that can start part-way into an epoch.

    The permutation depends only on ``seed`` and the epoch, as in torch's sampler, so
    every rank agrees on it and a resumed run sees the same order. ``set_epoch`` also
    reseeds ``worker_generator``, the generator the DataLoader draws its workers' seeds
    from, so that augmentation in workers is reproducible per epoch and per rank.
    """

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        num_replicas = comm.get_world_size() if num_replicas is None else num_replicas
        rank = comm.get_rank() if rank is None else rank
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
        self.worker_generator = torch.Generator()
        self._skip = 0
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        self.worker_generator.manual_seed(_mix(self.seed, epoch, self.rank))

    def skip(self, num_samples: int) -> None:
        """Leave out the first ``num_samples`` indices of this rank's next pass only."""
        self._skip = num_samples

    def __iter__(self):
        skip, self._skip = self._skip, 0
        if not skip:
            return super().__iter__()
        # The ranks took the first skip * num_replicas indices of the epoch's order; the rest is
        # shared out again. With as many ranks as before that is this rank's share less its first
        # ``skip``; after an elastic resume it still neither repeats nor leaves out a sample.
        return iter(self.epoch_order()[skip * self.num_replicas:][self.rank::self.num_replicas])

    def epoch_order(self) -> list:
        """The epoch's whole order, padded as ``DistributedSampler`` pads it: rank r's share is ``[r::num_replicas]``."""
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(self.dataset), generator=generator).tolist()
        else:
            order = list(range(len(self.dataset)))
        return (order * math.ceil(self.total_size / len(order)))[: self.total_size]

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
        self.dataset_len = len(dataset)
        self.num_replicas = comm.get_world_size() if num_replicas is None else num_replicas
        self.rank = comm.get_rank() if rank is None else rank
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

    def _shard(self, pass_index):
        if self.shuffle:
            order = torch.randperm(self.dataset_len, generator=torch.Generator().manual_seed(self.seed + pass_index))
            order = order.tolist()
        else:
            order = list(range(self.dataset_len))
        total = self.per_rank * self.num_replicas
        padded = (order * math.ceil(total / self.dataset_len))[:total]  # repeats the start, as DistributedSampler
        return padded[self.rank::self.num_replicas]


class EvalSampler(Sampler):
    """Shards a dataset over ranks without padding: every sample is seen exactly once.

    Rank ``r`` takes indices ``r, r + world, r + 2*world, ...``; shards differ in length
    by at most one, which is fine for evaluation (no collective runs per batch).
    """

    def __init__(self, dataset, num_replicas=None, rank=None):
        self.dataset_len = len(dataset)
        self.num_replicas = comm.get_world_size() if num_replicas is None else num_replicas
        self.rank = comm.get_rank() if rank is None else rank

    def __iter__(self):
        return iter(range(self.rank, self.dataset_len, self.num_replicas))

    def __len__(self) -> int:
        return len(range(self.rank, self.dataset_len, self.num_replicas))


def build_dataloader(
    dataset: Dataset,
    batch_size: int,
    num_workers: int = 0,
    shuffle: bool = True,
    phase: str = "train",
    distributed: bool = True,
    seed: int = 0,
    pin_memory=None,
    drop_last=None,
    persistent_workers=None,
    stream: bool = False,
    **kwargs,
) -> DataLoader:
    """A DataLoader for ``phase`` ("train", or "test"/"val"), sharded by global rank when several processes run.

    Training loaders use :class:`TrainSampler` (shuffled by ``seed`` and epoch, resumable),
    or with ``stream`` a :class:`StreamSampler` (endless, for ``max_iters``); evaluation
    loaders use :class:`EvalSampler` under several processes, so metrics count every
    sample once. ``drop_last`` defaults to True for training, ``pin_memory`` to
    whether CUDA is present, ``persistent_workers`` (with ``num_workers``) to True for
    evaluation and False for training. Other keyword arguments go to ``DataLoader``.
    """
    if len(dataset) == 0:
        raise DataError(f"the {phase} dataset is empty: check that its folder holds samples")
    train = phase == "train"
    drop_last = train if drop_last is None else drop_last
    pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
    world_size = comm.get_world_size() if distributed else 1
    generator = None
    if train:
        kind = StreamSampler if stream else TrainSampler
        sampler = kind(dataset, num_replicas=world_size, rank=comm.get_rank() if distributed else 0, shuffle=shuffle,
                       seed=seed)
        generator = sampler.worker_generator
    elif world_size > 1:
        sampler = EvalSampler(dataset, num_replicas=world_size)
    else:
        sampler = None
    per_rank = len(dataset) if sampler is None else getattr(sampler, "per_rank", None) or len(sampler)
    if drop_last and per_rank < batch_size:
        raise DataError(
            f"the {phase} loader yields no batch: {per_rank} samples per process < batch_size {batch_size}, "
            f"and drop_last drops the short batch; lower batch_size (or build the loader with drop_last=False)"
        )
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=False if sampler is not None else (shuffle and train),
        sampler=sampler,
        num_workers=num_workers,
        pin_memory=pin_memory,
        drop_last=drop_last,
        generator=generator,
        # Evaluation loaders keep their workers from one evaluation to the next; training loaders start
        # theirs each epoch, from seeds of (seed, epoch, rank), so that a resumed run draws the same
        # augmentation as an uninterrupted one (persistent workers would carry their streams on).
        persistent_workers=(not train if persistent_workers is None else persistent_workers) and num_workers > 0,
        **kwargs,
    )


def find_sampler(loader):
    """The index sampler behind ``loader`` (also through a batch sampler), or None."""
    sampler = getattr(loader, "sampler", None)
    batch_sampler = getattr(loader, "batch_sampler", None)
    if batch_sampler is not None and hasattr(batch_sampler, "sampler") and not isinstance(
        sampler, (DistributedSampler, EvalSampler)
    ):
        sampler = batch_sampler.sampler
    return sampler


def is_sharded(loader) -> bool:
    """Whether each rank sees a different part of the data (so metrics must be summed over ranks)."""
    if loader is None or comm.get_world_size() == 1:
        return False
    sampler = find_sampler(loader)
    return isinstance(sampler, (DistributedSampler, EvalSampler)) and getattr(sampler, "num_replicas", 1) > 1


def set_epoch(loader, epoch: int) -> None:
    sampler = find_sampler(loader)
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(epoch)


def iterate_from(loader, epoch: int, start_batch: int):
    """An iterator over ``loader`` for ``epoch`` that starts at batch ``start_batch``.

    With a :class:`TrainSampler` or :class:`StreamSampler` the skipped batches are never
    loaded; with any other loader they are loaded and dropped (slower, and the order must
    not depend on the global RNG for the resume to be exact).
    """
    set_epoch(loader, epoch)
    if start_batch == 0:
        return iter(loader)
    sampler = find_sampler(loader)
    batch_size = getattr(loader, "batch_size", None)
    if isinstance(sampler, (TrainSampler, StreamSampler)) and batch_size:
        sampler.skip(start_batch * batch_size)
        return iter(loader)
    logger.warning("resuming mid-epoch by loading and dropping %d batches: build the loader with "
                   "build_dataloader to skip them without loading", start_batch)
    iterator = iter(loader)
    for _ in range(start_batch):
        next(iterator)
    return iterator


def num_samples(loader) -> int:
    """Samples in the loader's dataset (all ranks together), or 0 when it has no length."""
    dataset = getattr(loader, "dataset", None)
    try:
        return len(dataset)
    except TypeError:
        return 0


def num_batches(loader) -> int:
    """The loader's length, or 0 when it has none (an endless stream, an iterable dataset)."""
    try:
        return len(loader)
    except TypeError:
        return 0


def set_batch_size(loader, batch_size: int) -> None:
    """Changes the per-process batch of a loader built with a sampler, in place (an elastic resume
    keeps the global batch on another number of processes)."""
    loader.batch_sampler.batch_size = batch_size
    object.__setattr__(loader, "batch_size", batch_size)  # DataLoader refuses the attribute after __init__


def has_length(loader) -> bool:
    try:
        len(loader)
    except TypeError:
        return False
    return True


def sample_order(loader):
    """The dataset indices ``loader`` yields, in order, when its sampler fixes them in advance
    (evaluation, sequential and distributed samplers); None otherwise (a random sampler, an
    iterable dataset)."""
    sampler = find_sampler(loader)
    if isinstance(sampler, (EvalSampler, SequentialSampler, DistributedSampler)):
        return list(sampler)
    return None


def _mix(seed: int, epoch: int, rank: int) -> int:
    """A 63-bit seed that differs for every (seed, epoch, rank)."""
    return (seed * 1_000_003 + epoch * 7_919 + rank * 104_729 + 0x5EED) % (2**63 - 1)

