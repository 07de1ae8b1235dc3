"""An epoch's order as a function, not a list: what a rank asks for its share and a resume for a position.

An :class:`Order` is a view of positions ``start, start + step, ...`` of a base order of ``size`` samples, taken
modulo ``size`` (so that an order padded as ``DistributedSampler`` pads it repeats its start). The base order is an
object whose ``at(positions)`` gives the sample at each position of a NumPy array: a shard-window order computes it
(:class:`~basetrainer.data.streaming.order.ShardWindows`, memory in shards), a plain dataset's permutation looks it
up (:class:`Permutation`, 8 bytes a sample, torch's ``randperm`` as ``DistributedSampler`` draws it). Slicing a view
gives a view, so ``order[skip * world:][rank::world]``, a rank's share of the rest of an epoch, costs what the start
of an epoch costs; iterating a view computes its samples a block at a time.
"""
from collections.abc import Sequence

import numpy as np
import torch

FIRST_BLOCK, BLOCK = 1_024, 65_536  # samples computed at once while iterating: a few first, then more


class Permutation:
    """A permutation held as an array: ``randperm(n)`` seeded by ``seed + epoch`` (``DistributedSampler``'s)."""

    def __init__(self, indices):
        self.indices = np.asarray(indices, dtype=np.int64)

    @classmethod
    def random(cls, n: int, seed: int, epoch: int) -> "Permutation":
        return cls(torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)).numpy())

    def __len__(self) -> int:
        return len(self.indices)

    def at(self, positions: np.ndarray) -> np.ndarray:
        return self.indices[positions]


class Identity:
    """Samples in dataset order (no shuffle)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def at(self, positions: np.ndarray) -> np.ndarray:
        return positions


class Order(Sequence):
    """Positions ``start + i * step`` (``i < length``) of ``base`` (an object with ``len`` and ``at``), modulo its
    size; ``Order(base)`` is the whole of it."""

    def __init__(self, base, start: int = 0, step: int = 1, length=None):
        self.base, self.size = base, len(base)
        self.start, self.step = start, step
        self.length = self.size if length is None else length

    def padded(self, total: int) -> "Order":
        """The first ``total`` samples of this order repeated end to end (``DistributedSampler``'s padding)."""
        return Order(self.base, self.start, self.step, total) if self.step == 1 and self.length == self.size \
            else Order(Permutation(self.array()), 0, 1, total)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, item):
        if isinstance(item, slice):
            taken = range(self.length)[item]
            return Order(self.base, self.start + taken.start * self.step, self.step * taken.step, len(taken))
        if not -self.length <= item < self.length:
            raise IndexError(f"position {item} of an order of {self.length} samples")
        return int(self.chunk(item % self.length, 1)[0])

    def chunk(self, first: int, count: int) -> np.ndarray:
        """The samples of ``count`` positions from ``first`` of this view, as an int64 array."""
        positions = self.start + np.arange(first, first + count, dtype=np.int64) * self.step
        return self.base.at(positions % self.size) if self.size else positions

    def blocks(self, block: int = BLOCK):
        """The view's samples as int64 arrays: ``FIRST_BLOCK`` (so that a first batch costs little), then twice as
        many each time up to ``block``."""
        first, size = 0, min(FIRST_BLOCK, block)
        while first < self.length:
            yield self.chunk(first, min(size, self.length - first))
            first, size = first + size, min(2 * size, block)

    def array(self) -> np.ndarray:
        """The view's samples as one int64 array (8 bytes a sample: for tests and small orders)."""
        return np.concatenate([np.empty(0, dtype=np.int64), *self.blocks()])

    def __iter__(self):
        for block in self.blocks():
            yield from block.tolist()

    def __eq__(self, other) -> bool:
        if not isinstance(other, (Sequence, np.ndarray)) or len(other) != len(self):
            return False
        other = other.array() if isinstance(other, Order) else np.asarray(other)
        return bool(np.array_equal(self.array(), other))

    __hash__ = None

    def __repr__(self) -> str:
        return f"Order({type(self.base).__name__} of {self.size}, start={self.start}, step={self.step}, " \
               f"length={self.length})"


def epoch_order(dataset, seed: int, epoch: int, shuffle: bool = True) -> Order:
    """The order of ``epoch``'s samples: the dataset's own (``epoch_permutation(seed, epoch)``, which may return an
    :class:`Order` or a list) when it has one, else ``randperm`` seeded by ``seed + epoch``; without ``shuffle``, the
    dataset's order."""
    if not shuffle:
        return Order(Identity(len(dataset)))
    own = getattr(dataset, "epoch_permutation", None)
    if own is None:
        return Order(Permutation.random(len(dataset), seed, epoch))
    order = own(seed, epoch)
    return order if isinstance(order, Order) else Order(Permutation(order))
