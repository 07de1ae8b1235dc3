"""Data loaders sharded by data-parallel rank (the global rank without a device mesh), and what the loop asks of a
loader: its length, its samples, a resumed epoch, the end of its worker processes."""
import contextlib
import os
import weakref

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, SequentialSampler
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from ..distributed import comm
from ..errors import DataError
from ..utils.log import get_logger
from .samplers import EvalSampler, StreamSampler, TrainSampler, find_sampler

logger = get_logger()

# The iterators with worker processes that iterate() started, by loader: what shut_down_workers ends.
_STARTED = weakref.WeakKeyDictionary()


def build_dataloader(
    dataset: Dataset,
    batch_size: int,
    num_workers: int = 0,
    shuffle: bool = True,
    phase: str = "train",
    distributed=None,
    seed: int = 0,
    pin_memory=None,
    drop_last=None,
    persistent_workers=None,
    stream: bool = False,
    **kwargs,
) -> DataLoader:
    """A DataLoader for ``phase`` ("train", or "test"/"val"), sharded by data-parallel rank when several processes run
    (the global rank; under a device mesh, processes of one tensor-parallel group get the same batches).

    The layout comes from the process group this process runs in, however it was made (``launch``, torchrun,
    SLURM, Ray Train's workers): ``distributed`` is kept for old scripts and changes nothing, since a loader that
    did not shard under several processes would train every process on the same data.

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
    world_size = comm.get_data_parallel_world_size()
    generator = None
    if train:
        kind = StreamSampler if stream else TrainSampler
        rank = comm.get_data_parallel_rank()
        sampler = kind(dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed)
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


def resolve_num_workers(num_workers, device: torch.device) -> tuple:
    """``(workers per process, why)`` for a ``num_workers`` setting: a number as it is, ``auto`` (in any case, as
    the config's check allows) as :func:`auto_num_workers` decides on ``device``. ``why`` says it in words, for
    the start-up log."""
    if isinstance(num_workers, str) and num_workers.strip().lower() == "auto":
        return auto_num_workers(device)
    return num_workers, "num_workers"


def auto_num_workers(device: torch.device) -> tuple:
    """``(workers per process, why)`` that ``num_workers: auto`` means on ``device``.

    On a GPU, ``min(8, usable cores per local process - 1)``: the cores this process may run on
    (``os.sched_getaffinity``) shared among the job's processes on this machine (``LOCAL_WORLD_SIZE``), one of
    them kept for the training process itself; 8 workers fed an H200 on the quick start (42% of each step waiting
    for data, against 75% with none). On the CPU, 0: the training's own threads already use every core, so
    workers compete with the compute instead of overlapping it (bench/RESULTS.md, "Loader workers")."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if device.type == "cpu":
        return 0, f"auto: on the CPU the training's threads use the {cores} cores, workers would compete with them"
    per_process = max(1, cores // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", 1))))
    return max(0, min(8, per_process - 1)), f"auto: min(8, {per_process} usable cores per process - 1) on {device.type}"


def is_sharded(loader) -> bool:
    """Whether each rank sees a different part of the data (so metrics must be summed over ranks)."""
    if loader is None or comm.get_data_parallel_world_size() == 1:
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
        return iterate(loader)
    sampler = find_sampler(loader)
    batch_size = getattr(loader, "batch_size", None)
    if isinstance(sampler, (TrainSampler, StreamSampler)) and batch_size:
        sampler.skip(start_batch * batch_size)
        return iterate(loader)
    logger.warning("resuming mid-epoch by loading and dropping %d batches: build the loader with "
                   "build_dataloader to skip them without loading", start_batch)
    iterator = iterate(loader)
    for _ in range(start_batch):
        next(iterator)
    return iterator


def iterate(loader):
    """``iter(loader)``, remembered when it starts worker processes, so that :func:`shut_down_workers` can end them."""
    iterator = iter(loader)
    if isinstance(loader, DataLoader) and isinstance(iterator, _MultiProcessingDataLoaderIter):
        _STARTED.setdefault(loader, weakref.WeakSet()).add(iterator)
    return iterator


def shut_down_workers(*loaders) -> None:
    """Ends the worker processes of ``loaders`` (loaders, None, or dicts of loaders, as ``test_loader`` may be):
    those of the iterators :func:`iterate` started on them and those a loader with ``persistent_workers`` keeps
    (its ``_iterator``, which the next ``iter`` then starts afresh).

    Without it a worker outlives the run: a persistent one as long as its loader, one of an iterator abandoned
    mid-epoch (a stop signal, an error, ``max_iters``) as long as the iterator, which an exception's traceback
    keeps. At interpreter exit torch no longer shuts them down, and the process waits up to 5 s for each
    (PyTorch issue 81794, with ``pin_memory``). Each worker is told to stop and joined, as torch does when an
    iterator is collected."""
    for loader in _each_loader(loaders):
        iterators = set(_STARTED.pop(loader, ())) if isinstance(loader, DataLoader) else set()
        kept = getattr(loader, "_iterator", None)
        if isinstance(kept, _MultiProcessingDataLoaderIter):
            iterators.add(kept)
            loader._iterator = None
        for iterator in iterators:
            iterator._shutdown_workers()  # what torch does when an iterator is collected, done now


@contextlib.contextmanager
def workers_shut_down_after(*loaders):
    """Runs the block, then :func:`shut_down_workers` for ``loaders`` however the block ends (returning or raising)."""
    try:
        yield
    finally:
        shut_down_workers(*loaders)


def _each_loader(loaders):
    for loader in loaders:
        if isinstance(loader, dict):
            yield from _each_loader(loader.values())
        elif loader is not None:
            yield loader


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
