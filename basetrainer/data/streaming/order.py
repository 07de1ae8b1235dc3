"""An epoch's order of a sharded dataset: random, and read a few shards at a time.

A plain random permutation would read every shard at every step, so that each process holds the whole data set
in its cache. Here the shards are shuffled, then taken ``window`` at a time and the samples of each window
shuffled together: at any moment the processes read from one window's shards (two across a window's end), and
the order is still a function of ``(seed, epoch)`` alone, which is all :class:`~basetrainer.data.samplers.TrainSampler`
needs to shard it over ranks and resume it exactly (as litdata and MosaicML Streaming shuffle shards, then samples
within a buffer of shards).
"""
import torch


def shard_window_order(shard_sizes: list, seed: int, epoch: int, window: int) -> list:
    """The sample indices of ``epoch`` for shards of ``shard_sizes`` samples (samples numbered shard by shard)."""
    generator = torch.Generator().manual_seed(seed + epoch)  # as TrainSampler seeds torch's permutation
    starts = torch.tensor([0, *shard_sizes]).cumsum(0)
    shards = torch.randperm(len(shard_sizes), generator=generator).tolist()
    order = []
    for first in range(0, len(shards), window):
        block = torch.cat([torch.arange(starts[s], starts[s + 1]) for s in shards[first:first + window]])
        order.append(block[torch.randperm(len(block), generator=generator)])
    return torch.cat(order).tolist()
