"""An epoch's order of a sharded dataset: random, and read a few shards at a time.

A plain random permutation would read every shard at every step, so that each process holds the whole data set
in its cache. Here the shards are shuffled, then taken ``window`` at a time: the samples of each shard of a
window are shuffled and cut into runs of ``RUN`` samples, and the runs of the window shuffled together. At any
moment the processes read from one window's shards (two across a window's end); within a run they read one
shard, which litdata reads far faster than a sample from another shard each time (it opens a chunk's layout anew
when the chunk changes: 280 against 9 microseconds a sample here). The order is still a function of
``(seed, epoch)`` alone, which is all :class:`~basetrainer.data.samplers.TrainSampler` needs to shard it over
ranks and resume it exactly (litdata and MosaicML Streaming shuffle so too: shards, then samples within a buffer
of shards).
"""
import torch

RUN = 8  # samples read in a row from one shard: a batch of 64 draws from up to 8 places of a window


def shard_window_order(shard_sizes: list, seed: int, epoch: int, window: int) -> list:
    """The sample indices of ``epoch`` for shards of ``shard_sizes`` samples (samples numbered shard by shard)."""
    generator = torch.Generator().manual_seed(seed + epoch)  # as TrainSampler seeds torch's permutation
    starts = torch.tensor([0, *shard_sizes]).cumsum(0).tolist()
    shards = torch.randperm(len(shard_sizes), generator=generator).tolist()
    order = []
    for first in range(0, len(shards), window):
        runs = []
        for shard in shards[first:first + window]:
            samples = (starts[shard] + torch.randperm(shard_sizes[shard], generator=generator)).tolist()
            runs += [samples[at:at + RUN] for at in range(0, len(samples), RUN)]
        for run in torch.randperm(len(runs), generator=generator).tolist():
            order += runs[run]
    return order
