"""Reading shards as a map-style dataset (basetrainer.data.streaming.dataset, .order): the epoch's order, its
partition over ranks, the seeded augmentation, and what replica groups deal."""
import pytest
import torch

from basetrainer.data.loaders import build_dataloader
from basetrainer.data.samplers import EvalSampler, TrainSampler
from basetrainer.data.streaming import open_shards
from basetrainer.fault_tolerance.batches import _loader_over, _share, _unpadded_order
from support.shards import numbered_shards


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return numbered_shards(tmp_path_factory.mktemp("shards"), n=96, shard_bytes=1200)


def _ids(batches):
    return [int(index) for batch in batches for index in batch[2]]


def test_an_epochs_order_is_every_sample_once_and_depends_only_on_seed_and_epoch(shards):
    data = open_shards(shards)
    order = data.epoch_permutation(7, 3)
    assert sorted(order) == list(range(96))
    assert order == open_shards(shards).epoch_permutation(7, 3) != data.epoch_permutation(7, 4)


def test_the_order_reads_one_shuffle_window_of_shards_at_a_time(shards):
    data = open_shards(shards, shuffle_window=2)
    order = data.epoch_permutation(0, 0)
    shard_of = data.manifest.shard_of
    windows = [{shard_of(index) for index in order[start:start + 24]} for start in range(0, 96, 24)]
    assert all(len(window) <= 4 for window in windows)  # 12 samples a shard: a window of 2 (or across two)
    first = len({shard_of(index) for index in order[:12]})
    assert first <= 2


def test_the_order_reads_runs_of_samples_from_one_shard_not_a_new_shard_each_sample(shards):
    data = open_shards(shards, shuffle_window=4)
    order = data.epoch_permutation(0, 0)
    switches = sum(data.manifest.shard_of(a) != data.manifest.shard_of(b) for a, b in zip(order, order[1:]))
    assert switches <= len(order) // 4  # runs of up to 8 (a shard's last run may be shorter)


@pytest.mark.parametrize("world", [1, 2, 3])
def test_the_ranks_train_on_every_sample_of_an_epoch_once(shards, world):
    data = open_shards(shards)
    taken = [index for rank in range(world) for index in TrainSampler(data, world, rank, seed=5)]
    assert sorted(taken) == list(range(96))  # 96 divides by 1, 2 and 3: no padding


@pytest.mark.parametrize("before, after", [(2, 1), (1, 2)])
def test_a_resumed_sampler_on_another_number_of_ranks_takes_the_rest_of_the_epoch_once(shards, before, after):
    data = open_shards(shards)
    taken = [i for rank in range(before) for i in list(TrainSampler(data, before, rank, seed=5))[:40 // before]]
    rest = []
    for rank in range(after):
        sampler = TrainSampler(data, after, rank, seed=5)
        sampler.skip(40 // after)  # what the engine's elastic layout asks after 40 samples of the epoch
        rest += list(sampler)
    assert sorted(taken + rest) == list(range(96))


def test_evaluation_over_ranks_reads_every_sample_once_without_padding(shards):
    data = open_shards(shards)
    read = [index for rank in range(5) for index in EvalSampler(data, num_replicas=5, rank=rank)]
    assert sorted(read) == list(range(96))


def test_a_loader_over_shards_yields_the_samplers_indices_in_its_order(shards):
    loader = build_dataloader(open_shards(shards), 8, distributed=False, seed=3)
    sampler = loader.sampler
    assert _ids(loader) == list(sampler)


def test_augmentation_is_the_same_for_a_sample_whoever_reads_it_and_differs_by_epoch(shards):
    def noise(sample):
        x, y, index = sample
        return x + torch.randn(8), y, index

    data = open_shards(shards, transform=noise)
    data.sampler_epoch(seed=5, epoch=0)
    first = data[17][0]
    torch.randn(100)  # whatever the process drew in between
    assert torch.equal(data[17][0], first)
    data.sampler_epoch(seed=5, epoch=1)
    assert not torch.equal(data[17][0], first)


def test_reading_a_sample_leaves_the_training_processs_random_streams_as_they_were(shards):
    data = open_shards(shards, transform=lambda sample: (sample[0] + torch.randn(8), *sample[1:]))
    data.sampler_epoch(seed=5, epoch=0)
    torch.manual_seed(1)
    data[3]
    drawn = torch.rand(1)
    torch.manual_seed(1)
    assert torch.equal(torch.rand(1), drawn)


def test_replica_groups_deal_the_rest_of_a_streams_epoch_without_overlap(shards):
    loader = build_dataloader(open_shards(shards), 4, distributed=False, seed=5)
    loader.sampler.set_epoch(2)
    order, position, world = _unpadded_order(loader.sampler), 28, 3
    read = [_ids(_loader_over(loader, _share(order, position, world, rank))) for rank in range(world)]
    flat = [index for share in read for index in share]
    assert len(flat) == len(set(flat)) == 66 and set(flat) <= set(order[position:])  # 68 left: 22 each
