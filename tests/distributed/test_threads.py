"""A process's threads: its share of the cores, fewer when other work keeps some busy, looked at again while it
trains; OMP_NUM_THREADS, deterministic and a later torch.set_num_threads are obeyed."""
import logging
import subprocess
import sys
import time

import pytest
import torch

from basetrainer.distributed import threads
from basetrainer.distributed.threads import CoreUse, choose_threads, set_process_threads
from basetrainer.engine.threads import ThreadCount
from support.toy import ToyTrainer, toy_cfg


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_a_process_alone_takes_its_share_of_the_cores():
    assert choose_threads(None, 1, cores=8, cpus=16)[0] == 8
    assert choose_threads(0.3, 1, cores=2, cpus=2) == (2, "2 cores / 1 process, 0.3 busy elsewhere")
    assert choose_threads(None, 2, cores=2, cpus=2) == (1, "2 cores / 2 processes")
    assert choose_threads(None, 4, cores=2, cpus=2)[0] == 1


def test_cores_busy_with_other_work_are_left_to_it():
    assert choose_threads(1.0, 1, cores=2, cpus=2) == (1, "2 cores, 1.0 busy with other work")
    assert choose_threads(5.0, 1, cores=2, cpus=2)[0] == 1  # never none
    assert choose_threads(8.0, 1, cores=8, cpus=16)[0] == 4  # 8 hyper-threads busy: about 4 cores
    assert choose_threads(6.0, 2, cores=16, cpus=16)[0] == 8  # 10 free, a share is 8


def test_omp_num_threads_decides_when_set(monkeypatch, restore_threads):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    assert set_process_threads(CoreUse()) == (1, "OMP_NUM_THREADS")


def test_without_proc_stat_the_share_is_taken(monkeypatch, restore_threads):
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(threads, "_busy_seconds", lambda cores: None)
    assert CoreUse().elsewhere() is None
    assert set_process_threads(CoreUse()) == choose_threads(None, 1)
    assert torch.get_num_threads() == choose_threads(None, 1)[0]


def test_deterministic_runs_keep_the_share_and_nothing_moves_it(monkeypatch, restore_threads):
    monkeypatch.delenv("OMP_NUM_THREADS")
    trainer = ToyTrainer(toy_cfg(deterministic=True))
    assert (trainer.threads, trainer.threads_reason) == choose_threads(None, 1)
    assert trainer.thread_count is None
    adaptive = ToyTrainer(toy_cfg())
    assert isinstance(adaptive.thread_count, ThreadCount) and adaptive.thread_count.threads == adaptive.threads


def test_the_count_follows_the_load_while_training(monkeypatch, restore_threads, caplog):
    torch.set_num_threads(2)
    count = ThreadCount(2, every_s=0.0)
    count.on_train_begin()
    monkeypatch.setattr("basetrainer.engine.threads.choose_threads", lambda elsewhere, processes: (1, "busy"))
    with caplog.at_level(logging.INFO, logger="basetrainer"):
        count.on_batch_end(0)
    assert torch.get_num_threads() == 1 and "threads per process: 2 -> 1 (busy)" in caplog.text


def test_a_count_someone_else_set_is_left_alone(monkeypatch, restore_threads):
    torch.set_num_threads(1)
    count = ThreadCount(2, every_s=0.0)
    count.on_train_begin()
    monkeypatch.setattr("basetrainer.engine.threads.choose_threads", lambda elsewhere, processes: (2, "free"))
    count.on_batch_end(0)
    assert torch.get_num_threads() == 1 and count.next_look == float("inf")


@pytest.mark.slow
def test_a_process_spinning_beside_it_counts_as_a_busy_core():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        use = CoreUse()
        time.sleep(1.0)
        assert use.elsewhere() >= 0.7
    finally:
        spinner.kill()
        spinner.wait()
