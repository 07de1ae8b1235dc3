"""The batches a replica group reads: its share of what the groups alive have not read yet this epoch.

Every group knows the epoch's order (the training sampler's: a function of seed and epoch) and how far the
committed steps have read into it (:attr:`ReplicaGroups.position <.replica_groups.ReplicaGroups.position>`). The
processes of the groups alive, ``world`` of them, deal the rest: process ``r`` takes every ``world``-th sample from
``r`` on, so that each step reads the next ``world x batch_size`` samples of the order, one batch per process, and no
sample is read by two groups. The same number of samples goes to every process (a remainder of fewer than
``world`` samples is left for the epoch, as ``drop_last`` does with a last short batch).

The deal holds while the groups alive stay the same and every step commits. When a group leaves or joins, or the
groups drop a step, the next step's position or world differs from what the loader was reading: the batches read
ahead are discarded and the rest of the epoch is dealt again from the committed position (the log says so). An
epoch therefore takes more steps while fewer groups are alive.
"""
from torch.utils.data import DataLoader

from ..data import loaders as data
from ..data.epoch_order import Order
from ..data.samplers import TrainSampler, find_sampler
from ..distributed import comm
from ..errors import ConfigError
from ..utils.batch import batch_size
from .messages import say


def check_loader(loader) -> None:
    """Replica groups deal the training data themselves: the loader must be one ``build_dataloader`` made."""
    if not isinstance(find_sampler(loader), TrainSampler) or not isinstance(loader, DataLoader):
        raise ConfigError("fault_tolerance deals the training data over the replica groups alive and needs the "
                          "training loader from self.build_dataloader(dataset, batch_size, ...): build it with that")


def planned_batches(loader, replica_groups: int) -> int:
    """Batches per epoch while every one of ``replica_groups`` groups is alive."""
    world = replica_groups * comm.get_data_parallel_world_size()
    per_process = len(find_sampler(loader).dataset) // world
    return -(-per_process // loader.batch_size)


def group_batches(groups, loader, epoch: int):
    """The batches of ``epoch`` for this process, from where the groups' committed steps left it (see the module
    docstring); before each step's first batch the groups' quorum is asked (:meth:`~basetrainer.fault_tolerance.replica_groups.ReplicaGroups.quorum`)."""
    groups.start_epoch(epoch)
    sampler = find_sampler(loader)
    sampler.set_epoch(epoch)
    order = _unpadded_order(sampler)
    dealt, iterator, inner = None, None, None
    try:
        while True:
            alive, place = groups.quorum()
            world = alive * comm.get_data_parallel_world_size()
            rank = place * comm.get_data_parallel_world_size() + comm.get_data_parallel_rank()
            deal = (groups.position, world, rank)
            if deal != dealt:
                if dealt is not None:
                    say("replica group %d: the rest of epoch %d (%d samples from position %d) dealt again "
                        "over %d group(s), this one %d", groups.group_id, epoch + 1,
                        len(order) - groups.position, groups.position, alive, place)
                data.shut_down_workers(inner)
                inner = _loader_over(loader, _share(order, groups.position, world, rank))
                iterator = data.iterate(inner)
            batch = next(iterator, None)
            if batch is None:
                return
            size = batch_size(batch)
            groups.read(size * world)
            dealt = (groups.position, world, rank)
            yield batch
    finally:
        data.shut_down_workers(inner)


def _unpadded_order(sampler: TrainSampler) -> Order:
    """The epoch's order, every sample once (the sampler's pads it for its own ranks), as a view."""
    return sampler.epoch_order()[:len(sampler.dataset)]


def _share(order: Order, start: int, world: int, rank: int) -> Order:
    """Process ``rank``'s share of ``order[start:]`` among ``world``: every ``world``-th sample from ``rank`` on, as
    many for every process."""
    rest = order[start:]
    return rest[rank::world][:len(rest) // world]


def _loader_over(loader: DataLoader, indices) -> DataLoader:
    """A loader like ``loader`` (batch size, workers, collation, pinning, worker seeds) over ``indices`` in order."""
    workers = loader.num_workers
    sampler = find_sampler(loader)
    return DataLoader(loader.dataset, batch_size=loader.batch_size, sampler=indices, num_workers=workers,
                      collate_fn=loader.collate_fn, pin_memory=loader.pin_memory, drop_last=False,
                      timeout=loader.timeout, worker_init_fn=loader.worker_init_fn,
                      multiprocessing_context=loader.multiprocessing_context if workers else None,
                      generator=getattr(sampler, "worker_generator", None),
                      prefetch_factor=loader.prefetch_factor if workers else None)

