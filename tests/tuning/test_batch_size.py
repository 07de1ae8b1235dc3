"""The batch-size finder on the CPU: the largest batch within a memory budget, by doubling then bisecting; the
throughput of every size; the trainer left as it was; one-line refusals."""
import re

import pytest
import torch
import yaml

from basetrainer.checkpoint.rng import get_rng_state
from basetrainer.errors import ConfigError
from basetrainer.tuning import BatchTrial, find_batch_size
from basetrainer.tuning.batch_size import BatchSizeResult, _knee, _lr_at, _search
from support.tuning import Disturbable, assert_bitwise_equal, assert_same_rng, disturbable, end_of_run

WIDE = 4096  # hidden units: 16 KiB of activations per sample, so memory grows measurably with the batch


def test_a_run_after_the_finder_is_bitwise_the_run_without_it():
    fresh = disturbable()
    fresh.run()
    probed = disturbable()
    before = get_rng_state()
    find_batch_size(probed, max_memory=64, steps=1, max_trials=4)
    assert_same_rng(get_rng_state(), before)
    probed.run()
    assert_bitwise_equal(end_of_run(probed), end_of_run(fresh))


def test_a_small_budget_finds_the_largest_size_within_it():
    result = find_batch_size(disturbable(width=WIDE, train_size=1024), max_memory=16, steps=1)
    sizes = {trial.batch_size: trial for trial in result.trials}
    assert 2 <= result.largest < 512 and sizes[result.largest].fits
    assert not sizes[result.largest + 1].fits  # bisected down to the next size
    assert all(trial.peak_memory_mib <= 16 for trial in result.trials if trial.fits)
    assert all(trial.peak_memory_mib > 16 for trial in result.trials if not trial.fits)


def test_sizes_are_doubled_from_the_first_then_bisected():
    tried = []

    def fits(size):
        tried.append(size)
        return size <= 40

    assert _search(fits, 2, 1000, 25) == 40
    assert tried == [2, 4, 8, 16, 32, 64, 48, 40, 44, 42, 41]


def test_doubling_stops_at_the_samples_a_process_has():
    tried = []
    assert _search(lambda size: tried.append(size) is None, 3, 20, 25) == 20
    assert tried == [3, 6, 12, 20]


def test_every_size_tried_reports_its_samples_per_second():
    result = find_batch_size(disturbable(), max_memory=64, steps=1, max_trials=3)
    assert [trial.batch_size for trial in result.trials] == [2, 4, 8]
    assert all(trial.samples_per_second > 0 for trial in result.trials)


def test_a_search_cut_short_by_max_trials_says_a_larger_size_may_fit():
    result = find_batch_size(disturbable(), max_memory=64, steps=1, max_trials=3)
    assert result.largest == 8 and result.limited_by_trials
    assert "max_trials sizes tried: a larger one may fit" in result.summary()


def test_a_size_that_runs_out_of_memory_does_not_fit_and_the_search_goes_on_below_it():
    class RunsOutAbove24(Disturbable):
        def run_step(self, inputs):
            if len(inputs[0]) > 24:  # what CUDA's allocator raises when a batch does not fit
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return super().run_step(inputs)

    trainer = RunsOutAbove24(disturbable().cfg)
    result = find_batch_size(trainer, max_memory=1024, steps=1)
    sizes = {trial.batch_size: trial for trial in result.trials}
    assert result.largest == 24 and not result.limited_by_trials
    assert (sizes[25].fits, sizes[25].note, sizes[25].peak_memory_mib) == (False, "out of memory", None)
    assert trainer.state.global_step == 0 and all(param.grad is None for param in trainer.model.parameters())


def test_the_knee_is_the_smallest_size_no_larger_one_beats_by_more_than_ten_percent():
    speeds = {2: 100.0, 4: 190.0, 8: 300.0, 16: 320.0, 32: 325.0, 24: 340.0}
    trials = [BatchTrial(size, True, 1.0, speed) for size, speed in speeds.items()]
    assert _knee(trials) == 16  # 24's 340 is within 10% of 320; 8's 300 is beaten by 340


def test_a_first_size_that_does_not_fit_is_a_one_line_error():
    trainer = disturbable(width=WIDE, train_size=1024)
    message = "first_size 512 does not fit: its steps took"
    with pytest.raises(ConfigError, match=re.escape(message)) as refused:
        find_batch_size(trainer, first_size=512, max_memory=1, steps=1)
    assert "\n" not in str(refused.value) and trainer.state.global_step == 0


@pytest.mark.parametrize("arguments, message", [
    ({"first_size": 97}, "first_size 97 is more than the 96 training samples each process has"),
    ({"first_size": 0}, "'first_size' expects an integer >= 1, got int 0 (given to find_batch_size)"),
    ({"max_memory": -1.0}, "'max_memory' expects a number > 0 or null, got float -1.0 (given to find_batch_size)"),
    ({"steps": 0}, "'steps' expects an integer >= 1, got int 0 (given to find_batch_size)"),
])
def test_bad_arguments_are_one_line_errors_before_any_step(arguments, message):
    trainer = disturbable()
    with pytest.raises(ConfigError, match=re.escape(message)) as refused:
        find_batch_size(trainer, **arguments)
    assert "\n" not in str(refused.value) and trainer.state.loss is None


class AdamDisturbable(Disturbable):
    def build_optimizer(self, cfg):
        return torch.optim.Adam(self.model.parameters(), lr=cfg.get("lr", 0.1))


def test_the_override_carries_lr_scaling_by_the_linear_rule_for_sgd_and_pasted_it_gives_the_scaled_lr():
    trainer = disturbable()  # SGD at lr 0.1, batches of 16
    scaling, note = _lr_at(trainer, 64)
    assert scaling == "{rule: linear, base_batch_size: 16}"
    assert note == "the lr follows the batch by the linear rule for SGD: 0.1 at batch 16 -> 0.4 at batch 64"
    result = BatchSizeResult([], 64, 64, None, False, False, scaling, note)
    assert result.override == "batch_size=64 'lr_scaling={rule: linear, base_batch_size: 16}'"
    pasted = yaml.safe_load(result.override.split("'")[1].split("=", 1)[1])
    assert disturbable(batch_size=64, lr_scaling=pasted).optimizer.param_groups[0]["initial_lr"] == pytest.approx(0.4)


def test_for_an_adam_type_optimizer_the_override_scales_the_lr_by_the_square_root_rule():
    scaling, note = _lr_at(AdamDisturbable(disturbable().cfg), 64)
    assert scaling == "{rule: sqrt, base_batch_size: 16}" and note.endswith("0.1 at batch 16 -> 0.2 at batch 64")


def test_a_run_that_scales_its_lr_already_needs_only_the_batch_size_in_the_override():
    trainer = disturbable(lr_scaling={"rule": "linear", "base_batch_size": 8})  # lr 0.2 at 16
    scaling, note = _lr_at(trainer, 64)
    assert scaling == "" and note == "lr_scaling (linear) scales the lr with the batch: 0.2 at batch 16 -> 0.8 at batch 64"
    assert BatchSizeResult([], 64, 64, None, False, False, scaling, note).override == "batch_size=64"


def test_the_configs_own_batch_needs_no_lr_in_the_override():
    assert _lr_at(disturbable(), 16) == ("", "the lr stays 0.1 at batch 16, the config's")
