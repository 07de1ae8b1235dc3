"""How the replica groups share an epoch's samples (basetrainer.fault_tolerance.batches) and cut the model into
DiLoCo's fragments (basetrainer.fault_tolerance.diloco): pure functions, checked over many layouts."""
import random

import pytest
import torch
from torch import nn

from basetrainer.fault_tolerance.batches import _share
from basetrainer.fault_tolerance.diloco import split_in_fragments
from basetrainer.fault_tolerance.replica_groups import ReplicaGroups


@pytest.mark.parametrize("seed", range(20))
def test_the_processes_alive_share_the_rest_of_the_order_without_overlap_and_alike(seed):
    rng = random.Random(seed)
    order = rng.sample(range(1000), rng.randint(1, 300))
    start, world = rng.randint(0, len(order)), rng.randint(1, 7)
    shares = [_share(order, start, world, rank) for rank in range(world)]
    read = [index for share in shares for index in share]
    assert len({len(share) for share in shares}) == 1  # as many for every process: as many steps
    assert len(read) == len(set(read)) and set(read) <= set(order[start:])
    assert len(order) - start - len(read) < world  # only a remainder smaller than the processes is left


def test_each_step_reads_the_next_samples_of_the_order_over_all_processes():
    order, world, batch = list(range(100, 148)), 3, 4
    shares = [_share(order, 0, world, rank) for rank in range(world)]
    step = sorted(index for share in shares for index in share[:batch])
    assert step == order[:world * batch]


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_fragments_are_contiguous_runs_of_about_equal_size_none_empty(count):
    model = nn.Sequential(nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 4), nn.Linear(4, 2))
    parameters = list(model.parameters())
    fragments = split_in_fragments(parameters, count)
    assert len(fragments) == min(count, len(parameters)) and all(fragments)
    assert [p for fragment in fragments for p in fragment] == parameters
    sizes = [sum(p.numel() for p in fragment) for fragment in fragments]
    assert max(sizes) <= sum(sizes) / len(sizes) + max(p.numel() for p in parameters)


def test_a_diloco_unit_that_runs_on_past_an_epoch_leaves_the_next_epoch_unread():
    # A sync every 20 steps, 11 steps an epoch: the unit's reads of epoch 1 are epoch 1's. They moved epoch 2's
    # position to the end of its order, and every later epoch read nothing.
    groups = ReplicaGroups(None, 0, "http://127.0.0.1:9", torch.device("cpu"))
    groups.start_epoch(0)
    for _ in range(11):
        groups.read(128)
    assert groups.position == 11 * 128
    groups.start_epoch(1)
    assert groups.position == 0 and groups.steps_pending == 11  # the sync still comes 20 steps after the last
