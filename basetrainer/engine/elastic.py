"""Elastic resume: a run continued on another number of processes keeps its global batch and its samples.

A checkpoint records the layout it was written with (data-parallel processes, per-process
batch, accumulation; under a device mesh the processes of one tensor-parallel group count
once). Resumed on another number of processes, the run keeps the global batch
(processes x batch x accumulation): first by changing the accumulation (2 -> 1 process:
twice as many batches per step), else by changing the per-process batch (1 -> 2 processes
without accumulation: half the batch each). The interrupted epoch goes on where all ranks
together stopped in its order (``TrainSampler`` shares out the rest of the epoch's order),
so no sample of that epoch is seen twice or left out. What changed is said in the log.
"""
from ..data import loaders
from ..distributed import comm
from ..utils.log import get_logger

logger = get_logger()


class DataLayout:
    """The checkpoint part that records the layout, and fits this run's to it on load.

    ``loader`` is the training loader (its per-process batch may change), ``state`` the run
    state (its accumulation, batches per epoch and start batch may change; loaded before
    this part), ``world_size`` this run's number of data-parallel processes (those that see different batches:
    every process, or under a device mesh its data-parallel size; the checkpoint's ``world_size`` means the same).
    """

    def __init__(self, loader, state, world_size: int):
        self.loader, self.state, self.world_size = loader, state, world_size

    def state_dict(self) -> dict:
        return {"world_size": self.world_size, "loader_batch_size": getattr(self.loader, "batch_size", None),
                "accumulate_grad_batches": self.state.accumulate_grad_batches}

    def load_state_dict(self, saved: dict, name: str) -> None:
        old_world, world = int(saved.get("world_size", self.world_size)), self.world_size
        old_batch, old_accumulate = saved.get("loader_batch_size"), saved.get("accumulate_grad_batches")
        batch = getattr(self.loader, "batch_size", None)
        if old_world == world or not old_batch or not old_accumulate or not batch:
            return
        state = self.state
        global_batch = old_world * old_batch * old_accumulate
        if global_batch % (world * batch) == 0:
            accumulate = global_batch // (world * batch)
        elif global_batch % world == 0:
            accumulate, batch = 1, global_batch // world
            loaders.set_batch_size(self.loader, batch)
            state.batches_per_epoch = loaders.num_batches(self.loader)
        else:
            logger.warning("%s was written by %d process(es) with a global batch of %d, which %d process(es) "
                           "cannot share evenly: training goes on with a global batch of %d", name, old_world,
                           global_batch, world, world * batch * state.accumulate_grad_batches)
            return
        state.accumulate_grad_batches = accumulate
        consumed = state.start_batch * old_batch * old_world  # of the interrupted epoch's order, by all ranks
        state.start_batch = consumed // (world * batch)
        if comm.is_main_process():
            logger.info("elastic resume: %s was written by %d process(es) (batch %d, accumulation %d), this run has "
                        "%d: batch %d, accumulation %d per process keep the global batch of %d; epoch %d goes on "
                        "after its first %d samples", name, old_world, old_batch, old_accumulate, world, batch,
                        accumulate, global_batch, state.start_epoch + 1, consumed)
