"""The losses of the text task, computed from the model's logits as the HF models compute theirs (float32
logits, the labels shifted by one, ``IGNORE`` ignored), so that a run and the HF ``Trainer``
agree on the same batches.

A training step's causal-LM loss is the mean over every token that takes a loss in the step: in all the
batches of its accumulation window, on every data-parallel process (the HF ``Trainer``'s ``num_items_in_batch``
with ``average_tokens_across_devices``). Each batch's summed loss is divided by that count, multiplied by the
window's size and the number of processes, which the engine's division by the window and DDP's and FSDP's
averaging of the gradients undo. Two processes with batches of ``b`` sequences, or one with windows of two
batches of ``b``, then take the steps one process takes with batches of ``2b``, whatever the number of padding
and prompt tokens in each.

The count is known before the window starts (:class:`WindowTokens`): the training sampler fixes each epoch's
order in advance, and each sample's tokens that take a loss are counted once when the data are encoded. Where
the order is not fixed in advance (an endless stream, the batches replica groups deal), each batch is divided
by its own count over the processes instead (one all-reduce of a number), and a window averages its batches.
"""
import torch
import torch.nn.functional as F

from ...data.samplers import TrainSampler, find_sampler
from ...distributed import comm
from .encoding import IGNORE


def token_losses(logits: torch.Tensor, labels: torch.Tensor) -> tuple:
    """``(sum, count)``: the summed cross-entropy of predicting ``labels[:, t]`` from position ``t - 1``, and the
    number of tokens that took a loss."""
    shifted = F.pad(labels, (0, 1), value=IGNORE)[:, 1:]
    total = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), shifted.reshape(-1),
                            ignore_index=IGNORE, reduction="sum")
    return total, (shifted != IGNORE).sum()


def learnt_tokens(samples) -> list:
    """Each sample's tokens that take a loss (its labels after the first, not ``IGNORE``)."""
    return [sum(label != IGNORE for label in labels[1:]) for labels in samples["labels"]]


class WindowTokens:
    """The tokens that take a loss in an accumulation window, on every process, read ahead from the training
    sampler's order for the epoch: global batch ``b`` is the order's ``[b * B * R, (b + 1) * B * R)``, ``B`` the
    batch size and ``R`` the processes (each process's ``b``-th batch takes every ``R``-th of those), also after a
    resume mid-epoch. None from :meth:`of` where the loader's sampler is no :class:`TrainSampler`."""

    def __init__(self, loader, counts: list):
        sampler = find_sampler(loader)
        self.loader, self.sampler = loader, sampler if isinstance(sampler, TrainSampler) else None
        self.counts = counts
        self._epoch, self._order = None, None

    def of(self, epoch: int, first_batch: int, batches: int):
        """The count for the window of ``batches`` batches from ``first_batch`` of ``epoch`` (None when the window
        is not in the epoch's order, as a tuning tool's steps may be)."""
        if self.sampler is None:
            return None
        if self._epoch != epoch:
            self._epoch, self._order = epoch, self.sampler.epoch_order()
        per_batch = self.loader.batch_size * self.sampler.num_replicas  # the batch-size finder changes it
        window = self._order[first_batch * per_batch:(first_batch + batches) * per_batch]
        return sum(self.counts[i] for i in window) or None


def training_loss(total: torch.Tensor, count: torch.Tensor, window_tokens=None, window: int = 1) -> torch.Tensor:
    """One process's batch's loss for backward (see the module docstring): ``total``, its summed loss, over the
    ``window_tokens`` of its window (an int), or without them over this batch's ``count`` on every process."""
    processes = comm.get_data_parallel_world_size()
    if window_tokens is not None:
        return total * (processes * window) / max(window_tokens, 1)  # one process, no window: total / tokens
    if processes > 1:
        count = comm.all_reduce_sum(count.clone())
    return total * processes / count.clamp(min=1)
