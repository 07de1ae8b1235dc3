"""A folder of shards as the samplers see it, without its data: its length and its epoch order
(:func:`basetrainer.data.streaming.order.shard_window_order`), for the order's checks at 10^6 to 10^9 samples
(tests/data/streaming/test_order.py, bench/scale.py)."""
from basetrainer.data.streaming.order import shard_window_order


class ShardSizes:
    """What the samplers see of a folder of shards of ``sizes`` samples: its length and its epoch order."""

    def __init__(self, sizes, window=4):
        self.sizes, self.window = sizes, window

    def __len__(self):
        return int(self.sizes.sum())

    def epoch_permutation(self, seed, epoch):
        return shard_window_order(self.sizes, seed, epoch, self.window)
