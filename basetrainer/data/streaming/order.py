"""An epoch's order of a sharded dataset: random, read a few shards at a time in short runs, and computed, not held.

A plain random permutation would read every shard at every step, so that each process holds the whole data set
in its cache. Here the shards are shuffled, then taken ``window`` at a time; the samples of a window (its shards
end to end, turned by a few samples that change with the epoch, so that the same samples do not always travel
together) are cut into runs of ``RUN`` consecutive samples, and the runs are shuffled within the window. At any
moment the processes read from one window's shards (two across a window's end), and within a run they read one
shard in order (two where a run crosses from one shard to the next), which litdata serves from the rows it has
just decoded: 36 microseconds a sample on 4 MB shards here, against 230 for a sample anywhere in its shard and 280
for one from another shard each time (litdata and MosaicML Streaming shuffle so too: shards, then samples within a
buffer of shards). A batch of 64 draws from up to 8 places of a window: write the samples in a random order
(``basetrainer shards`` does for an image folder), so that consecutive samples are unlike.

Both shuffles are seeded bijections (:mod:`basetrainer.data.bijection`) keyed by ``(seed, epoch)`` and the
window, so the sample at any position is computed in a few operations: a process holds 16 bytes a shard and 64
a window, whatever the samples, and a resume at any position costs what a start costs.
"""
import numpy as np

from ..bijection import key_of, mix64, permute, unpermute
from ..epoch_order import Order

RUN = 8  # consecutive samples read from one shard


class ShardWindows:
    """The order of ``epoch`` for shards of ``shard_sizes`` samples (samples numbered shard by shard), as an
    :class:`~basetrainer.data.epoch_order.Order` base: ``at(positions)`` gives the samples there."""

    def __init__(self, shard_sizes, seed: int, epoch: int, window: int):
        sizes = np.asarray(shard_sizes, dtype=np.int64)
        count, key = len(sizes), key_of(seed, epoch)
        shards = permute(np.arange(count, dtype=np.int64), count, key) if count else sizes
        first_sample = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if count else sizes
        # where each shard of the epoch's order starts reading; a position's sample is the position plus its
        # shard's offset
        self.read_starts = np.concatenate([[0], np.cumsum(sizes[shards])]).astype(np.int64)
        self.offsets = first_sample[shards] - self.read_starts[:-1]
        window_starts = self.read_starts[np.arange(0, count + window, window).clip(max=count)]
        size = np.diff(window_starts)
        keys = mix64(key ^ mix64(np.arange(len(size), dtype=np.uint64)))
        runs = np.maximum(1, -(-size // RUN))
        last_run = size - (runs - 1) * RUN  # the last run of a window may be shorter
        short_slot = unpermute(runs - 1, runs, keys)  # where the short run is read
        turn = (keys % np.uint64(RUN)).astype(np.int64)
        self.window_starts = window_starts
        # one row a window, so that a block of positions gathers its windows' values at once
        self.windows = np.stack([window_starts[:-1], size, runs, last_run, short_slot, turn, keys.view(np.int64)],
                                axis=1) if len(size) else np.zeros((0, 7), dtype=np.int64)

    def __len__(self) -> int:
        return int(self.read_starts[-1])

    def at(self, positions: np.ndarray) -> np.ndarray:
        window = np.searchsorted(self.window_starts, positions, side="right") - 1
        start, size, runs, last_run, short_slot, turn, keys = self.windows[window].T
        inside = positions - start
        # the runs are read in the shuffled order; the short one, at short_slot, moves those after it back
        after_short = inside >= short_slot * RUN + last_run
        shifted = np.where(after_short, inside - last_run + RUN, inside)
        slot = np.where((inside >= short_slot * RUN) & ~after_short, short_slot, shifted // RUN)
        within = np.where(slot == short_slot, inside - short_slot * RUN, shifted % RUN)
        run = permute(slot, runs, keys.view(np.uint64))
        read = start + (run * RUN + within + turn) % size
        shard = np.searchsorted(self.read_starts, read, side="right") - 1
        return read + self.offsets[shard]


def shard_window_order(shard_sizes, seed: int, epoch: int, window: int):
    """The :class:`~basetrainer.data.epoch_order.Order` of ``epoch``'s samples over shards of ``shard_sizes``."""
    return Order(ShardWindows(shard_sizes, seed, epoch, window))
