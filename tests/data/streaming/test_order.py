"""The shard-window order at the scale users stream (basetrainer.data.streaming.order): an index of shard sizes only,
no data. Every sample once per epoch over 4 ranks x 4 loader workers, an elastic resume 4 -> 3 at 90% of the epoch
that reads every remaining sample once, and what a process holds, which grows with the shards, not the samples."""
import numpy as np
import pytest

from basetrainer.data.samplers import TrainSampler
from basetrainer.data.streaming.order import ShardWindows, shard_window_order
from support.shard_index import ShardSizes

SCALES = [1_000_000, pytest.param(10_000_000, marks=pytest.mark.slow)]  # 10^7: about 10 s on 2 loaded cores


@pytest.fixture(scope="module", params=SCALES, ids=lambda samples: f"{samples:.0e}")
def index(request):
    """``samples`` in shards of 500 to 1,500 samples (10^4 shards for 10^7 samples)."""
    samples = request.param
    sizes = np.random.default_rng(62).integers(500, 1500, samples // 900)
    sizes = sizes[np.cumsum(sizes) < samples]
    return ShardSizes(np.append(sizes, samples - sizes.sum()))


def _batches_of_workers(share, batch, workers):
    """Each loader worker's samples of a rank's share: whole batches, batch b to worker b % workers (the
    DataLoader's deal)."""
    block = batch * workers * 256
    for first in range(0, len(share), block):
        ids = share.chunk(first, min(block, len(share) - first))
        worker = (np.arange(len(ids)) // batch) % workers
        for w in range(workers):
            yield ids[worker == w]


def test_four_ranks_with_four_loader_workers_read_every_sample_once(index):
    seen, read = np.zeros(len(index), dtype=bool), 0
    for rank in range(4):
        for ids in _batches_of_workers(TrainSampler(index, 4, rank, seed=3).share(), batch=48, workers=4):
            assert not seen[ids].any()  # no rank or worker reads what another read
            seen[ids], read = True, read + len(ids)
    assert read == len(index) and seen.all()


def test_an_elastic_resume_from_four_ranks_to_three_at_90_percent_reads_every_remaining_sample_once(index):
    global_batch = 192  # 4 x 48 before, 3 x 64 after
    done = len(index) * 9 // 10 // global_batch  # the global batches of 90% of the epoch
    seen = np.zeros(len(index), dtype=bool)
    for rank in range(4):
        for ids in TrainSampler(index, 4, rank, seed=3).share()[:done * 48].blocks():
            seen[ids] = True
    assert seen.sum() == done * global_batch
    rest = [TrainSampler(index, 3, rank, seed=3).share(skip=done * 64) for rank in range(3)]
    remaining, padding = np.zeros(len(index), dtype=bool), []
    for share in rest:
        for ids in share.blocks():
            fresh = ids[~seen[ids]]
            assert not remaining[fresh].any()
            remaining[fresh] = True
            padding += ids[seen[ids]].tolist()
    assert (seen | remaining).all()
    order = TrainSampler(index, 3, 0, seed=3).epoch_order()
    assert sorted(padding) == sorted(order[:len(order) - len(index)])  # DistributedSampler's padding: the order's start


def test_a_process_holds_bytes_per_shard_not_per_sample():
    def held(order):
        return sum(value.nbytes for value in vars(order).values() if isinstance(value, np.ndarray))

    small, large = ShardWindows(np.full(1000, 100), 1, 0, 4), ShardWindows(np.full(1000, 1_000_000), 1, 0, 4)
    assert held(small) == held(large) <= 1000 * 16 + 250 * 64 + 16  # 16 bytes a shard, 64 a window


def test_a_position_deep_in_the_epoch_is_computed_without_the_positions_before_it():
    order = shard_window_order(np.full(2000, 500_000), seed=1, epoch=2, window=4)  # 10^9 samples
    position = 900_000_000
    assert order[position] == order.chunk(position - 3, 4)[3] != order[position + 1]
    assert order[:position + 2][-2:] == order.chunk(position, 2)  # a view's end is computed alone
