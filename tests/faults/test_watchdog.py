"""The watchdog's rules, in this process: what is timed and how long, a silent peer, a finished one."""
import threading
import time

import pytest

from basetrainer.distributed import watchdog
from basetrainer.errors import WatchdogTimeout


# ---------------------------------------------------------------------- the watchdog
def test_the_watchdog_times_no_step_during_warm_up_or_a_save_and_then_allows_the_larger_of_floor_and_factor():
    dog = watchdog.Watchdog(timeout=10, factor=5)
    for _ in range(watchdog.WARMUP_STEPS + 1):
        dog.beat()
    assert dog.limit() is None  # the warm-up steps are not timed
    dog._last -= 4.0  # a step of 4 s
    dog.beat()
    assert dog.limit() == pytest.approx(20.0, abs=0.01)  # 5 x the median step (4 s) is above the 10 s floor
    with dog.phase("save"):
        assert dog.limit() is None
    with dog.phase("evaluation"):
        assert dog.limit() == pytest.approx(20.0, abs=0.01)


class FakeStore:
    """The few store calls the watchdog makes, in memory (what every rank's watchdog would see)."""

    def __init__(self):
        self.values = {}

    def add(self, key, amount):
        self.values[key] = int(self.values.get(key, 0)) + amount
        return self.values[key]

    def set(self, key, value):
        self.values[key] = value

    def get(self, key):
        return str(self.values[key]).encode()

    def check(self, keys):
        return all(key in self.values for key in keys)

    def delete_key(self, key):
        return self.values.pop(key, None) is not None


def test_a_peer_whose_watchdog_falls_silent_ends_this_rank_naming_the_peer(monkeypatch, caplog):
    store, exited = FakeStore(), threading.Event()
    store.set("basetrainer/watchdog/progress/1", "4")  # rank 1 began 2 batches and finished 2, then died
    monkeypatch.setattr(watchdog, "_store", lambda world_size: store)
    monkeypatch.setattr(watchdog.os, "_exit", lambda code: exited.set())
    dog = watchdog.Watchdog(timeout=1.0, factor=1.0, rank=0, world_size=2)
    with caplog.at_level("ERROR", logger="basetrainer"), dog.watching(), dog.phase("save"):  # a save: no step limit
        assert exited.wait(10)
    message = caplog.records[0].getMessage()
    assert message.startswith("rank 0: watchdog: nothing finished for ")
    assert "(save) and the watchdog of rank(s) [1] has been silent for 0.5s: dead or frozen" in message
    assert f"exit code {WatchdogTimeout.exit_code}" in message and "Thread 0x" in message


def test_a_peer_that_finished_its_epochs_is_not_taken_for_dead(monkeypatch):
    store, exited = FakeStore(), threading.Event()
    store.set("basetrainer/watchdog/done/1", "16")
    monkeypatch.setattr(watchdog, "_store", lambda world_size: store)
    monkeypatch.setattr(watchdog.os, "_exit", lambda code: exited.set())
    dog = watchdog.Watchdog(timeout=0.5, factor=1.0, rank=0, world_size=2)
    with dog.watching(), dog.phase("save"):
        time.sleep(1.5)
    assert not exited.is_set()
