"""An epoch's order over several sources mixed by weight: each source's share exact from the weights, its samples
in its own shard-window order, and the sources interleaved so that every stretch of the epoch holds them in
proportion.

An epoch has as many samples as the sources together (``E``). Source ``i`` of weight ``w_i`` takes ``k_i`` of
them, ``E * w_i / sum(w)`` rounded so that the shares add up to ``E`` (the largest remainders round up). Its
samples come from a stream of its own epochs, one after the other (each a
:class:`~basetrainer.data.streaming.order.ShardWindows` order keyed by the seed, the source and that epoch), and
epoch ``t`` of the mixture reads the stream's positions ``[t * k_i, (t + 1) * k_i)``: a source smaller than its
share is repeated, a larger one is read without repeats until its own epoch ends, and the next epoch of the
mixture goes on where this one stopped (MosaicML Streaming's ``Stream(proportion=...)``).

The interleaving is cut into frames of about ``FRAME`` positions: frame ``f`` holds ``T_i(f + 1) - T_i(f)`` samples
of source ``i``, with ``T_i(f) = floor(f * FRAME * k_i / E)``, so that any stretch of the epoch holds each source in
its proportion to within one sample a frame; inside a frame the sources' samples are merged in a seeded random
order, each source's in its own order. Everything is a function of ``(seed, epoch)``, computed a block at a
time: a process holds the sources' shard orders (16 bytes a shard) and nothing a sample.
"""
import numpy as np

from ..bijection import key_of, mix64, permute
from ..epoch_order import Order
from .order import ShardWindows

FRAME = 1024  # positions a frame of the interleaving holds, about


def shares(samples, weights) -> list:
    """Each source's samples in an epoch of ``sum(samples)``: in proportion to ``weights``, largest remainders up."""
    total, weight = sum(samples), sum(weights)
    exact = [total * w / weight for w in weights]
    taken = [int(share) for share in exact]
    for i in sorted(range(len(exact)), key=lambda i: taken[i] - exact[i])[:total - sum(taken)]:
        taken[i] += 1
    return taken


class Mixture:
    """The order of ``epoch`` over ``sources`` (a list of ``(shard_sizes, weight)``), samples numbered source by
    source and within a source shard by shard, as an :class:`~basetrainer.data.epoch_order.Order` base."""

    def __init__(self, sources, seed: int, epoch: int, window: int):
        self.sizes = [np.asarray(sizes, dtype=np.int64) for sizes, _ in sources]
        self.samples = np.array([int(sizes.sum()) for sizes in self.sizes], dtype=np.int64)
        self.first = np.concatenate([[0], np.cumsum(self.samples)])  # each source's first sample id
        self.total = int(self.samples.sum())
        self.shares = np.array(shares(self.samples.tolist(), [w for _, w in sources]), dtype=np.int64)
        self.seed, self.epoch, self.window = seed, epoch, window
        self.key = key_of(seed, epoch, len(sources))
        self.frames = -(-self.total // FRAME)
        self._orders = {}  # (source, its epoch) -> ShardWindows, made when first read

    def __len__(self) -> int:
        return self.total

    def contributions(self) -> list:
        """Per source: ``(samples in this epoch, its samples, where in its own stream this epoch starts)``."""
        return [(int(k), int(n), int(k) * self.epoch) for k, n in zip(self.shares, self.samples)]

    def _frame_starts(self, frames: np.ndarray) -> np.ndarray:
        """``T_i(f)`` for each frame of ``frames`` (rows) and source (columns)."""
        frames = np.minimum(frames, self.frames)
        targets = (frames[:, None] * FRAME * self.shares[None, :]) // max(self.total, 1)
        return np.where(frames[:, None] >= self.frames, self.shares[None, :], targets)

    def at(self, positions: np.ndarray) -> np.ndarray:
        frame = positions // FRAME  # a position's frame is this one or a neighbour: frames differ from FRAME by < K
        frame += (positions >= self._frame_starts(frame + 1).sum(axis=1)).astype(np.int64)
        frame -= (positions < self._frame_starts(frame).sum(axis=1)).astype(np.int64)
        frames = np.unique(frame)
        ids, offsets = self._frame_samples(frames)
        inside = positions - self._frame_starts(frame).sum(axis=1)
        return ids[offsets[np.searchsorted(frames, frame)] + inside]

    def _frame_samples(self, frames: np.ndarray):
        """The sample ids of ``frames``, each frame's in its order, end to end, and where each frame starts."""
        begin, end = self._frame_starts(frames), self._frame_starts(frames + 1)
        counts = end - begin  # (frames, sources)
        lengths = counts.sum(axis=1)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        frame_of = np.repeat(np.arange(len(frames)), lengths)
        place = np.arange(offsets[-1]) - offsets[frame_of]  # the place within its frame
        keys = mix64(np.uint64(self.key) ^ mix64(frames.astype(np.uint64)))
        slot = permute(place, lengths[frame_of], keys[frame_of])  # a seeded merge of the sources
        bounds = np.cumsum(counts, axis=1)
        source = (slot[:, None] >= bounds[frame_of]).sum(axis=1)
        group = frame_of * len(self.shares) + source  # the frame's samples of one source, in their order
        by_group = np.argsort(group, kind="stable")
        group_start = np.concatenate([[0], np.cumsum(counts.reshape(-1))])
        rank = np.empty(len(place), dtype=np.int64)
        rank[by_group] = np.arange(len(place)) - group_start[group[by_group]]
        stream = self.epoch * self.shares[source] + begin[frame_of, source] + rank  # in the source's stream
        ids = np.empty(len(place), dtype=np.int64)
        for i in np.unique(source):
            mine = source == i
            ids[mine] = self.first[i] + self._stream(int(i), stream[mine])
        return ids, offsets

    def _stream(self, source: int, positions: np.ndarray) -> np.ndarray:
        """The sample (within ``source``) at each position of its stream of epochs."""
        size = int(self.samples[source])
        own_epoch, inside = positions // size, positions % size
        out = np.empty(len(positions), dtype=np.int64)
        for e in np.unique(own_epoch):
            chosen = own_epoch == e
            key = (source, int(e))
            if key not in self._orders:
                if len(self._orders) > 4:
                    self._orders.clear()
                self._orders[key] = ShardWindows(self.sizes[source], int(key_of(self.seed, source)), int(e),
                                                 self.window)
            out[chosen] = self._orders[key].at(inside[chosen])
        return out


def mixture_order(sources, seed: int, epoch: int, window: int) -> Order:
    """The :class:`~basetrainer.data.epoch_order.Order` of ``epoch``'s samples over ``sources``."""
    return Order(Mixture(sources, seed, epoch, window))
