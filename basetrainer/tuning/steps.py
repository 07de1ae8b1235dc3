"""Optimizer steps taken through a trainer's own ``train_step``, outside its loop: what the tuning tools train with.

A step is one accumulation window (``accumulate_grad_batches`` batches, as the loop counts them), with the
trainer's forward, loss, backward, gradient sync, clipping and scaler. No event fires. The loss of a step is
averaged over its batches and over the data-parallel ranks, so that every rank reads the same number and takes
the same decisions.
"""
import torch

from ..data import loaders as data
from ..distributed import comm
from ..engine.loss_tally import LossTally
from ..errors import DataError


def cycled_batches(loader, first_epoch: int):
    """``(batch index, inputs)`` of ``loader`` from ``first_epoch`` on, epoch after epoch: a short loader cycles."""
    epoch = first_epoch
    while True:
        empty = True
        for batch, inputs in enumerate(data.iterate_from(loader, epoch, 0)):
            empty = False
            yield batch, inputs
        if empty:
            raise DataError("the training loader yields no batch: add data, or lower batch_size")
        epoch += 1


def optimizer_steps(trainer, loader):
    """Trains ``trainer`` on ``loader``'s batches, step after step; yields each step's loss (a float, the same
    on every rank; NaN or inf when it is). The caller decides when to stop, and puts the trainer back."""
    state = trainer.state
    state.loss_tally = LossTally(check=False)  # a diverging sweep is a result, not an error
    state.batches_per_epoch = data.num_batches(loader)  # where the loop's accumulation windows end
    trainer.model.train()
    window = []
    for batch, inputs in cycled_batches(loader, state.epoch):
        state.batch = batch
        trainer.train_step(trainer.to_device(inputs))
        window.append(state.loss)
        if not state.accumulating:
            mean = torch.stack(window).float().mean()
            window = []
            yield comm.sum_over_ranks(mean)[0] / comm.get_data_parallel_world_size()
