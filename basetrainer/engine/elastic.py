"""Elastic resume: a run continued on another number of processes keeps its global batch and its samples.

A checkpoint records the layout it was written with (processes, per-process batch,
accumulation). Resumed on another number of processes, the run keeps the global batch
(processes x batch x accumulation): first by changing the accumulation (2 -> 1 process:
twice as many batches per step), else by changing the per-process batch (1 -> 2 processes
without accumulation: half the batch each). The interrupted epoch goes on where all ranks
together stopped in its order (``TrainSampler`` shares out the rest of the epoch's order),
so no sample of that epoch is seen twice or left out. What changed is said in the log.
"""
import dataclasses

from ..data import loaders as data
from ..distributed import comm
from ..utils.log import get_logger

logger = get_logger()


def layout(trainer) -> dict:
    """What a checkpoint records to be resumed elastically (besides ``world_size``)."""
    return {"loader_batch_size": getattr(trainer.train_loader, "batch_size", None),
            "accumulate_grad_batches": trainer.options.accumulate_grad_batches}


def adapt(trainer, saved: dict, name: str) -> None:
    """Fits ``trainer`` (built for this number of processes) to continue ``saved``, a checkpoint
    written by another number: same global batch, same place in the interrupted epoch."""
    old_world, world = int(saved.get("world_size", trainer.world_size)), trainer.world_size
    old_batch, old_accumulate = saved.get("loader_batch_size"), saved.get("accumulate_grad_batches")
    batch = getattr(trainer.train_loader, "batch_size", None)
    if old_world == world or not old_batch or not old_accumulate or not batch:
        return
    global_batch = old_world * old_batch * old_accumulate
    if global_batch % (world * batch) == 0:
        accumulate = global_batch // (world * batch)
    elif global_batch % world == 0:
        accumulate, batch = 1, global_batch // world
        data.set_batch_size(trainer.train_loader, batch)
        trainer.state.batches_per_epoch = data.num_batches(trainer.train_loader)
    else:
        logger.warning("%s was written by %d process(es) with a global batch of %d, which %d process(es) cannot "
                       "share evenly: training goes on with a global batch of %d", name, old_world, global_batch,
                       world, world * batch * trainer.options.accumulate_grad_batches)
        return
    trainer.options = dataclasses.replace(trainer.options, accumulate_grad_batches=accumulate)
    state = trainer.state
    consumed = state.start_batch * old_batch * old_world  # of the interrupted epoch's order, by all ranks
    state.start_batch = consumed // (world * batch)
    if comm.is_main_process():
        logger.info("elastic resume: %s was written by %d process(es) (batch %d, accumulation %d), this run has %d: "
                    "batch %d, accumulation %d per process keep the global batch of %d; epoch %d goes on after "
                    "its first %d samples", name, old_world, old_batch, old_accumulate, world, batch, accumulate,
                    global_batch, state.start_epoch + 1, consumed)
