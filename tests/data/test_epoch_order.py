"""An epoch's order as a view (basetrainer.data.epoch_order): slicing it is slicing the list it stands for,
padding pads as DistributedSampler pads, and a plain dataset's order is DistributedSampler's."""
import numpy as np
import pytest
from torch.utils.data import DistributedSampler

from basetrainer.data.epoch_order import Order, Permutation, epoch_order
from basetrainer.data.samplers import TrainSampler


def _order(n=50):
    return Order(Permutation(np.random.default_rng(0).permutation(n)))


@pytest.mark.parametrize("first, second", [(slice(7, None), slice(2, None, 3)), (slice(None, 40), slice(1, 30, 4)),
                                           (slice(-10, None), slice(None, None, -1)), (slice(3, 3), slice(None))])
def test_a_slice_of_a_slice_is_what_the_list_would_give(first, second):
    order = _order()
    assert list(order[first][second]) == list(order)[first][second]


def test_positions_count_from_the_end_as_a_lists_do_and_past_it_fail():
    order = _order()
    assert order[-1] == list(order)[-1] and order[3] == list(order)[3]
    with pytest.raises(IndexError):
        order[50]


def test_padding_repeats_the_orders_start_as_distributed_sampler_pads():
    order = _order(10)
    assert list(order.padded(23)) == (list(order) * 3)[:23]
    assert list(order.padded(7)) == list(order)[:7]  # drop_last cuts
    assert list(order[2:8].padded(9)) == (list(order)[2:8] * 2)[:9]


def test_an_order_equals_the_list_it_stands_for():
    order = _order(10)
    assert order == list(order) and order != list(order)[::-1] and order != list(order)[:9]


def test_a_plain_datasets_order_is_distributed_samplers():
    data = list(range(103))
    for rank in range(4):
        torch_sampler = DistributedSampler(data, num_replicas=4, rank=rank, seed=11)
        ours = TrainSampler(data, num_replicas=4, rank=rank, seed=11)
        for epoch in (0, 2):
            torch_sampler.set_epoch(epoch)
            ours.set_epoch(epoch)
            assert list(ours) == list(torch_sampler)


def test_without_shuffle_the_order_is_the_datasets():
    assert list(epoch_order(range(9), seed=1, epoch=1, shuffle=False)) == list(range(9))


def test_a_dataset_may_give_its_order_as_a_list():
    class Reversed:
        def __len__(self):
            return 5

        def epoch_permutation(self, seed, epoch):
            return [4, 3, 2, 1, 0]

    assert list(epoch_order(Reversed(), 0, 0)) == [4, 3, 2, 1, 0]
