"""Several sources of shards mixed by weight (basetrainer.data.streaming.mixture, .sources): each source's share of
an epoch exact from the weights, smaller sources repeated, larger ones read without repeats within their own epoch,
the ranks' shares and an elastic resume over a mixture, and one data set from open_shards' list."""
import logging

import numpy as np
import pytest

from basetrainer.data.samplers import TrainSampler
from basetrainer.data.streaming import open_shards
from basetrainer.data.streaming.mixture import Mixture, mixture_order, shares
from basetrainer.errors import ConfigError
from support.shards import numbered_shards

SMALL, LARGE = (np.full(10, 100), 1.0), (np.full(90, 100), 1.0)  # 1,000 and 9,000 samples, as much weight each


def _source_of(order, mixture):
    return np.searchsorted(mixture.first, order, side="right") - 1


def test_shares_follow_the_weights_and_add_up_to_the_epoch():
    assert shares([100, 5000, 2000], [0.3, 0.5, 0.2]) == [2130, 3550, 1420]
    assert shares([1, 1, 1], [1, 1, 1]) == [1, 1, 1]
    assert sum(shares([7, 11, 13], [1, 2, 4])) == 31


def test_each_source_gives_its_exact_share_of_every_epoch():
    for epoch in range(3):
        order = mixture_order([SMALL, LARGE], seed=2, epoch=epoch, window=4)
        assert np.bincount(_source_of(order.array(), order.base)).tolist() == [5000, 5000]


def test_a_source_smaller_than_its_share_is_repeated_evenly():
    order = mixture_order([SMALL, LARGE], seed=2, epoch=0, window=4).array()
    small = order[order < 1000]
    assert np.bincount(small, minlength=1000).tolist() == [5] * 1000  # its share, 5,000, is 5 of its epochs


def test_a_source_larger_than_its_share_is_read_without_repeats_until_its_own_epoch_ends():
    large = [(a := mixture_order([SMALL, LARGE], seed=2, epoch=e, window=4).array())[a >= 1000] for e in (0, 1, 2)]
    first_pass = np.concatenate([large[0], large[1][:4000]])  # 5,000 + 4,000: its whole epoch of 9,000
    assert np.array_equal(np.sort(first_pass), np.arange(1000, 10_000))
    assert len(np.unique(large[0])) == len(large[0]) == 5000


def test_every_stretch_of_the_epoch_holds_the_sources_in_proportion():
    order = mixture_order([SMALL, LARGE], seed=2, epoch=1, window=4)
    frames = _source_of(order.array(), order.base)[:8192].reshape(8, 1024)
    assert all(abs((frame == 0).sum() - 512) <= 2 for frame in frames)


def test_the_mixture_is_a_function_of_seed_and_epoch():
    first = mixture_order([SMALL, LARGE], seed=2, epoch=1, window=4)
    assert first == mixture_order([SMALL, LARGE], seed=2, epoch=1, window=4).array()
    assert first != mixture_order([SMALL, LARGE], seed=2, epoch=2, window=4).array()
    assert first != mixture_order([SMALL, LARGE], seed=3, epoch=1, window=4).array()


def test_an_elastic_resume_over_a_mixture_reads_the_rest_of_the_epoch_once():
    class Sources:
        def __len__(self):
            return 10_000

        def epoch_permutation(self, seed, epoch):
            return mixture_order([SMALL, LARGE], seed, epoch, 4)

    whole = TrainSampler(Sources(), 1, 0, seed=4).epoch_order()
    taken = [i for rank in range(4) for i in list(TrainSampler(Sources(), 4, rank, seed=4))[:1500]]
    rest = [i for rank in range(3) for i in TrainSampler(Sources(), 3, rank, seed=4).share(skip=2000)]
    padding = list(whole[:2])  # 3 ranks pad 10,000 to 10,002 with the order's start
    assert sorted(taken + rest) == sorted(list(whole) + padding)


def test_positions_deep_in_a_large_mixture_are_computed_alone():
    order = mixture_order([(np.full(10_000, 1000), 3.0), (np.full(1000, 1000), 1.0)], seed=0, epoch=5, window=4)
    assert order[9_000_000] == order.chunk(8_999_990, 20)[10]
    assert isinstance(order.base, Mixture) and len(order) == 11_000_000


@pytest.fixture(scope="module")
def two_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixture")
    return numbered_shards(root / "a", n=24, shard_bytes=1200), numbered_shards(root / "b", n=72, shard_bytes=1200)


def test_open_shards_reads_a_list_of_sources_as_one_data_set_numbered_source_by_source(two_folders):
    data = open_shards([{"path": two_folders[0], "weight": 1}, {"path": two_folders[1], "weight": 1}])
    assert len(data) == 96
    assert int(data[3][2]) == 3 and int(data[24 + 5][2]) == 5  # each sample's own index in its source
    order = TrainSampler(data, 1, 0, seed=1).epoch_order()
    assert (np.asarray(list(order)) < 24).sum() == 48  # the first source, 24 samples, gives half the epoch


def test_each_epoch_the_log_says_what_each_source_gave(two_folders, caplog):
    data = open_shards([{"path": two_folders[0], "weight": 3}, {"path": two_folders[1], "weight": 1}])
    with caplog.at_level(logging.INFO, logger="basetrainer"):
        TrainSampler(data, 1, 0, seed=1).set_epoch(0)
    said = [record.getMessage() for record in caplog.records if "mixes" in record.getMessage()]
    assert len(said) == 1 and "72 samples (75.0%), 3.00 x its 24" in said[0] and "24 samples (25.0%)" in said[0]


@pytest.mark.parametrize("sources, named", [([], "non-empty list"), ([{"path": "x", "weight": 0}], "[0].weight"),
                                            ([{"path": "x", "weight": "a"}], "[0].weight"),
                                            ([{"folder": "x"}], "[0]: {'folder': 'x'} is not")])
def test_a_bad_list_of_sources_is_refused_in_one_line(sources, named):
    with pytest.raises(ConfigError, match=r"^train_data") as refused:
        open_shards(sources, name="train_data")
    assert named in str(refused.value) and "\n" not in str(refused.value)


def test_a_checkpoint_names_the_sources_and_weights_and_a_resume_on_other_weights_warns(two_folders, caplog):
    from basetrainer.data.streaming.position import StreamPosition

    mixed = [{"path": two_folders[0], "weight": 3}, {"path": two_folders[1], "weight": 1}]
    saved = StreamPosition(open_shards(mixed), lambda: 40).state_dict()
    assert saved["stream"]["location"] == f"{two_folders[0]} x 3 + {two_folders[1]} x 1"
    reweighted = open_shards([mixed[0], {"path": two_folders[1], "weight": 2}])
    with caplog.at_level(logging.WARNING, logger="basetrainer"):
        StreamPosition(reweighted, lambda: 0).load_state_dict(saved, "last.pth")
    assert any("x 1' -> " in record.getMessage() and "the shards' manifest" in record.getMessage()
               for record in caplog.records)
