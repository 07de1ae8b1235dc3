"""``num_workers: auto``: how many loader workers it means on a GPU and on the CPU, and why; a number stays as given."""
import os

import pytest
import torch

from basetrainer.data.loaders import auto_num_workers, resolve_num_workers


@pytest.fixture
def cores(monkeypatch):
    """Makes this process see ``n`` usable cores and ``processes`` processes of the job on its machine."""
    def set_up(n, processes=None):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(n)))
        if processes is None:
            monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
        else:
            monkeypatch.setenv("LOCAL_WORLD_SIZE", str(processes))

    return set_up


@pytest.mark.parametrize("usable, processes, expected", [(32, None, 8), (16, 2, 7), (2, None, 1), (4, 4, 0)])
def test_auto_on_a_gpu_is_at_most_8_and_leaves_one_core_per_process_to_training(cores, usable, processes, expected):
    cores(usable, processes)
    workers, why = auto_num_workers(torch.device("cuda", 0))
    assert workers == expected
    assert why == f"auto: min(8, {usable // (processes or 1)} usable cores per process - 1) on cuda"


def test_auto_on_the_cpu_is_no_worker_whatever_the_cores(cores):
    cores(64)
    assert auto_num_workers(torch.device("cpu")) == (
        0, "auto: on the CPU the training's threads use the 64 cores, workers would compete with them")


def test_a_number_of_workers_is_kept_as_given_on_any_device_and_auto_is_read_in_any_case():
    assert resolve_num_workers(3, torch.device("cpu")) == (3, "num_workers")
    assert resolve_num_workers(0, torch.device("cuda")) == (0, "num_workers")
    assert resolve_num_workers(" AUTO", torch.device("cpu")) == auto_num_workers(torch.device("cpu"))
