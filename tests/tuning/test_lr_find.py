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
from basetrainer.tuning.range_test import Divergence, LRFindResult, suggest, sweep_lrs
from basetrainer.tuning.reports import plot_lr_find, write_csv
from support import loss_curves
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


def test_the_suggestion_leaves_out_the_first_tenth_and_every_point_from_the_lowest_on():
    lrs = sweep_lrs(1e-5, 1.0, 50)
    smoothed = [2.0 - 0.02 * step for step in range(30)] + [1.5 + 0.1 * step for step in range(20)]  # lowest: 29
    smoothed[3] = 1.6  # a steep drop where the sweep starts
    smoothed[40] = 1.45  # a deep dip past the lowest point (a diverged loss's wiggle), still above it
    assert 5 <= lrs.index(suggest(lrs, smoothed, 50)) < 29


def test_no_suggestion_when_the_loss_was_lowest_within_the_first_tenth():
    lrs = sweep_lrs(1e-5, 1.0, 50)
    smoothed = [1.0 + 0.1 * step for step in range(50)]  # rising from the start: min_lr is already too high
    assert suggest(lrs, smoothed, 50) is None


@pytest.mark.parametrize("losses", [loss_curves.SEED_2020, loss_curves.SEED_1, loss_curves.SEED_2],
                         ids=["seed 2020", "seed 1", "seed 2"])
def test_on_recorded_sweeps_of_the_digits_the_sweep_stops_past_the_lowest_point_and_suggests_a_rate_in_the_descent(
        losses):
    result = replay(losses)
    assert result.stopped and len(result.lrs) < 100
    assert 0.005 < result.suggestion < 0.02 < result.lowest  # the quick start trains at 0.05 after warm-up


def test_a_diverged_loss_that_levels_off_below_the_threshold_stops_the_sweep_and_wins_no_suggestion():
    # The sweep: past the divergence the loss levels off near 5.4, so the smoothed loss never reaches
    # 4 x its lowest (about 1.74), and a wiggle in the level at step 96 is steeper than the real descent.
    level = [5.4 + 0.4 * math.sin(step) for step in range(22)]
    level[17] = 3.0  # the wiggle: a dip, then back
    losses = loss_curves.SEED_2020[:78] + level
    smoothed = replay(losses, diverge=1000.0).smoothed  # the sweep run to its end, as the smoothed rule alone does
    assert max(smoothed[78:]) < 4 * min(smoothed)
    assert suggest(sweep_lrs(1e-7, 10, 100), smoothed, 100) == pytest.approx(0.0123, rel=0.01)
    result = replay(losses)
    assert len(result.lrs) < 85 and "exceeded 1.5 x the" in result.stopped
    assert result.suggestion == pytest.approx(0.0123, rel=0.01)


def test_a_noisy_flat_start_neither_stops_the_sweep_nor_wins_the_suggestion():
    noise = np.random.default_rng(0).uniform(-0.4, 0.4, size=45)  # +-15% on a loss near 2.6
    losses = [loss + wobble for loss, wobble in zip(loss_curves.SEED_2020[:45], noise)] + loss_curves.SEED_2020[45:]
    result = replay(losses)
    assert len(result.lrs) > 70
    assert result.suggestion == pytest.approx(0.0123, rel=0.01)


def test_a_late_spike_does_not_stop_a_sweep_still_descending_and_its_decay_wins_no_suggestion():
    losses = list(loss_curves.SEED_2020)
    losses[66] = 12.0  # one wild step late in the descent
    result = replay(losses)
    assert len(result.lrs) > 75  # the median of 5 steps is not moved by one
    assert 0.005 < result.suggestion < 0.02 and result.suggestion < result.lowest


def test_a_loss_that_is_not_finite_stops_the_sweep_before_it_is_recorded():
    result = replay([2.0, 1.9, 1.8, float("nan"), 1.0])
    assert result.losses == [2.0, 1.9, 1.8] and result.stopped == "the loss was nan at lr 1.75e-07"


def replay(losses, diverge=4.0):
    """The range test's rules on recorded losses, as :func:`lr_find` applies them (100 planned steps, lr 1e-7 to
    10, the default smoothing): what it would have stopped at and suggested."""
    lrs = sweep_lrs(1e-7, 10, 100)
    divergence, stopped = Divergence(0.98, diverge), None
    for loss, lr in zip(losses, lrs):
        stopped = divergence.add(loss, lr)
        if stopped:
            break
    swept = lrs[:len(divergence.smoothed)]
    return LRFindResult(swept, divergence.losses, divergence.smoothed, suggest(swept, divergence.smoothed, 100), 100,
                        stopped)


def test_on_a_toy_problem_the_suggestion_lies_between_too_small_and_diverging():
    result = lr_find(disturbable(train_size=256), min_lr=1e-4, max_lr=100, num_steps=60)
    assert 1e-2 < result.suggestion < result.lowest <= result.lrs[-1]
    assert result.override == f"lr={result.suggestion:.3g}"


def test_the_sweep_stops_once_the_smoothed_loss_diverges():
    result = lr_find(disturbable(), min_lr=1e-3, max_lr=1e6, num_steps=60, diverge=4.0)
    assert len(result.lrs) < 60 and "exceeded" in result.stopped
    assert max(result.smoothed[-1], float(np.median(result.losses[-5:]))) > 4.0 * min(result.smoothed[:-1]) or \
        "the sweep started from" in result.stopped


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
