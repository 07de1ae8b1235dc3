"""The learning-rate range test: it leaves the trainer as it found it, suggests where the loss falls fastest,
stops when the loss diverges, and refuses bad arguments before any step."""
import math
import os
import re

import numpy as np
import pytest

from basetrainer.checkpoint.rng import get_rng_state
from basetrainer.data.samplers import find_sampler
from basetrainer.engine.events import Callback
from basetrainer.errors import ConfigError
from basetrainer.tuning import TuningMethods, lr_find
from basetrainer.tuning.range_test import suggest, sweep_lrs
from basetrainer.tuning.reports import plot_lr_find, write_csv
from support.tuning import Disturbable, assert_bitwise_equal, assert_same_rng, disturbable, end_of_run


def test_a_run_after_the_range_test_is_bitwise_the_run_without_it():
    fresh = disturbable()
    fresh.run()
    probed = disturbable()
    lr_find(probed, min_lr=1e-4, max_lr=10, num_steps=25)  # 25 steps of 6 batches an epoch: the loader cycles
    probed.run()
    assert_bitwise_equal(end_of_run(probed), end_of_run(fresh))


def test_the_range_test_puts_back_the_random_streams_loader_and_counters_it_found():
    trainer = disturbable()
    before, groups_before = get_rng_state(), [dict(group) for group in trainer.optimizer.param_groups]
    lr_find(trainer, min_lr=1e-4, max_lr=10, num_steps=25)
    assert_same_rng(get_rng_state(), before)
    sampler = find_sampler(trainer.train_loader)
    state = trainer.state
    assert (sampler.epoch, state.epoch, state.global_step, state.samples_seen) == (0, 0, 0, 0)
    assert trainer.optimizer.param_groups == groups_before and not trainer.optimizer.state


def test_the_range_test_fires_no_event():
    class Counts(Callback):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def on_batch_end(self, batch, logs=None):
            self.calls += 1

    counts = Counts()
    trainer = disturbable()
    trainer.callbacks.append(counts)
    lr_find(trainer, num_steps=10)
    assert counts.calls == 0


def test_the_sweep_grows_the_lr_by_a_constant_factor_from_min_lr_to_max_lr():
    lrs = sweep_lrs(1e-6, 1.0, 7)
    assert lrs[0] == 1e-6 and lrs[-1] == pytest.approx(1.0)
    assert np.allclose(np.diff(np.log10(lrs)), 1.0)


def test_the_suggestion_is_the_steepest_descent_of_the_smoothed_loss():
    lrs = sweep_lrs(1e-5, 1.0, 50)
    smoothed = [2.0 - math.tanh((step - 30) / 3) for step in range(50)]  # falls fastest at step 30
    assert suggest(lrs, smoothed, 50) == lrs[30]


def test_the_suggestion_leaves_out_the_first_tenth_and_the_last_point():
    lrs = sweep_lrs(1e-5, 1.0, 50)
    smoothed = [1.0] * 50
    smoothed[1], smoothed[-1] = 0.0, -10.0  # steep drops where the sweep starts and where it ends
    assert suggest(lrs, smoothed, 50) not in (lrs[0], lrs[1], lrs[-2], lrs[-1])


def test_on_a_toy_problem_the_suggestion_lies_between_too_small_and_diverging():
    result = lr_find(disturbable(train_size=256), min_lr=1e-4, max_lr=100, num_steps=60)
    assert 1e-2 < result.suggestion < result.lrs[-1]
    assert result.override == f"lr={result.suggestion:.3g}"


def test_the_sweep_stops_once_the_smoothed_loss_diverges():
    result = lr_find(disturbable(), min_lr=1e-3, max_lr=1e6, num_steps=60, diverge=4.0)
    assert len(result.lrs) < 60 and "exceeded 4 x its lowest" in result.stopped
    assert result.smoothed[-1] > 4.0 * min(result.smoothed[:-1])


def test_every_loss_is_smoothed_with_bias_correction():
    result = lr_find(disturbable(), min_lr=1e-6, max_lr=1e-5, num_steps=5, smooth=0.5)
    average = 0.0
    for step, (loss, smoothed) in enumerate(zip(result.losses, result.smoothed)):
        average = 0.5 * average + 0.5 * loss
        assert smoothed == pytest.approx(average / (1 - 0.5 ** (step + 1)))
    assert result.smoothed[0] == result.losses[0]  # the first point is the loss itself, not half of it


@pytest.mark.parametrize("arguments, message", [
    ({"min_lr": 1.0, "max_lr": 1.0}, "max_lr 1 is not above min_lr 1"),
    ({"min_lr": 0.0}, "'min_lr' expects a number > 0, got float 0.0 (given to lr_find)"),
    ({"num_steps": 1}, "'num_steps' expects an integer >= 2, got int 1 (given to lr_find)"),
    ({"smooth": 1.0}, "'smooth' expects a number in [0, 1), got float 1.0 (given to lr_find)"),
    ({"diverge": 1.0}, "'diverge' expects a number > 1, got float 1.0 (given to lr_find)"),
])
def test_bad_arguments_are_one_line_errors_before_any_step(arguments, message):
    trainer = disturbable()
    with pytest.raises(ConfigError, match=re.escape(message)) as refused:
        lr_find(trainer, **arguments)
    assert "\n" not in str(refused.value) and trainer.state.loss is None  # no step was taken


def test_a_trainer_with_the_tuning_methods_runs_the_range_test_itself():
    class Tunable(TuningMethods, Disturbable):
        pass

    trainer = Tunable(disturbable().cfg)
    assert len(trainer.lr_find(num_steps=8).lrs) == 8


def test_the_csv_and_the_picture_hold_every_step(tmp_path):
    result = lr_find(disturbable(), min_lr=1e-4, max_lr=10, num_steps=20)
    table = write_csv(result.rows(), str(tmp_path / "lr_find.csv"))
    picture = plot_lr_find(result, str(tmp_path / "lr_find.png"))
    lines = open(table).read().splitlines()
    assert lines[0] == "step,lr,loss,smoothed_loss" and len(lines) == 1 + len(result.lrs)
    assert open(picture, "rb").read(8) == b"\x89PNG\r\n\x1a\n" and os.path.getsize(picture) > 10_000


def test_under_lr_scaling_the_override_is_the_config_lr_that_scales_to_the_suggestion():
    trainer = disturbable(lr_scaling={"rule": "linear", "base_batch_size": 8})  # batches of 16: lr x 2
    result = lr_find(trainer, min_lr=1e-4, max_lr=10, num_steps=20)
    assert result.lr_scale == 2.0 and result.override == f"lr={result.suggestion / 2:.3g}"
