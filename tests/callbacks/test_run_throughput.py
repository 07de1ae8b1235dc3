"""RunThroughput: the whole run's rate counts every second since training began; the steady state's counts the
training batches after the first few only, evaluations left out (read on a clock the test moves by hand)."""
import types

import pytest

from basetrainer.callbacks import run_throughput
from basetrainer.callbacks.run_throughput import RunThroughput


class Clock:
    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(run_throughput, "time", clock)
    return clock


def train(rate, clock, state, seconds_per_batch, batches=1, evaluation_seconds=0.0):
    """``batches`` batches of 16 samples, each taking ``seconds_per_batch``, the last with an evaluation inside."""
    for index in range(batches):
        clock.now += seconds_per_batch
        state.samples_seen += 16
        if evaluation_seconds and index == batches - 1:
            rate.test_begin()
            clock.now += evaluation_seconds
            rate.evaluation_end()
        rate.batch_end(state)


def test_a_slow_first_batch_and_an_evaluation_lower_the_whole_runs_rate_only(clock):
    rate, state = RunThroughput(steady_after=2), types.SimpleNamespace(samples_seen=100)  # 100: before a resume
    rate.train_begin(state)
    rate.epoch_begin()
    train(rate, clock, state, 30.0)  # compilation
    train(rate, clock, state, 1.0, batches=5, evaluation_seconds=10.0)
    assert rate.samples(state) == 96 and rate.seconds() == 45.0
    assert rate.whole_run(state) == pytest.approx(96 / 45)
    assert rate.steady(state) == pytest.approx(16 * 4 / 4)  # batches 3 to 6, 1 s each


def test_time_between_epochs_is_in_the_whole_runs_rate_only(clock):
    rate, state = RunThroughput(steady_after=1), types.SimpleNamespace(samples_seen=0)
    rate.train_begin(state)
    rate.epoch_begin()
    train(rate, clock, state, 1.0, batches=3)
    clock.now += 20.0  # the epoch-end evaluation and checkpoint
    rate.epoch_begin()
    train(rate, clock, state, 1.0, batches=2)
    assert rate.whole_run(state) == pytest.approx(80 / 25)
    assert rate.steady(state) == pytest.approx(16.0)


def test_no_steady_rate_before_a_batch_after_the_first_steady_after(clock):
    rate, state = RunThroughput(steady_after=3), types.SimpleNamespace(samples_seen=0)
    rate.train_begin(state)
    rate.epoch_begin()
    train(rate, clock, state, 1.0, batches=3)
    assert rate.steady(state) is None and rate.whole_run(state) == pytest.approx(16.0)
    train(rate, clock, state, 2.0)
    assert rate.steady(state) == pytest.approx(8.0)
