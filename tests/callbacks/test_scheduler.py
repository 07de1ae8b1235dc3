"""The schedules' lr at chosen iterations equals their documented closed form.

Throughout: 10 epochs of 5 batches (T = 50 iterations), lr_init = 0.1, and where
warm-up is on, 2 epochs of it (W = 10 iterations) starting from 1% of the target.
"""
import io
import math
import warnings

import pytest
import torch

from basetrainer.engine.events import HIGHEST, Callback, CallbackList
from basetrainer.errors import ConfigError
from basetrainer.scheduler import get_scheduler
from basetrainer.scheduler.build_scheduler import get_scheduler as get_scheduler_old_path
from support.toy import ToyTrainer, toy_cfg

EPOCHS, STEPS, LR = 10, 5, 0.1
T, W = EPOCHS * STEPS, 2 * STEPS
ALL_NAMES = ["multi-step", "step", "cosine", "exp", "poly", "one-cycle", "constant"]
NEEDED = {"milestones": [4, 7], "step_size": 3}


def make_optimizer(*lrs):
    groups = [{"params": [torch.nn.Parameter(torch.zeros(1))], "lr": lr} for lr in lrs or (LR,)]
    return torch.optim.SGD(groups, lr=LR)


def lrs_per_iteration(callback, optimizer, iterations, group=0):
    """The lr each training batch uses, stepping the callback as the trainer does."""
    used = []
    for it in range(iterations):
        used.append(optimizer.param_groups[group]["lr"])
        optimizer.step()
        callback.on_batch_end(it % STEPS, {})
    return used


def curve(name, num_warn_up=2, iterations=T, **options):
    optimizer = make_optimizer()
    callback = get_scheduler(name, optimizer, LR, EPOCHS, STEPS, num_warn_up=num_warn_up, **options)
    return lrs_per_iteration(callback, optimizer, iterations)


def warmup(it, target):
    """The linear ramp from 1% of lr_init to ``target`` at W."""
    return LR * (0.01 + (target - 0.01) * it / W)


def assert_points(lrs, expected):
    for it, lr in expected.items():
        assert lrs[it] == pytest.approx(lr, rel=1e-9, abs=1e-12), f"iteration {it}"


def test_old_import_path_is_the_same_function():
    assert get_scheduler_old_path is get_scheduler


def test_scheduler_is_a_callback_that_runs_first():
    callback = get_scheduler("cosine", make_optimizer(), LR, EPOCHS, STEPS)
    assert isinstance(callback, Callback) and callback.priority == HIGHEST


def test_multi_step_follows_its_closed_form():
    lrs = curve("multi-step", milestones=[4, 7])
    assert_points(lrs, {
        0: LR * 0.01, 5: warmup(5, 1.0), 9: warmup(9, 1.0), W: LR,
        4 * STEPS - 1: LR, 4 * STEPS: LR * 0.1,
        7 * STEPS - 1: LR * 0.1, 7 * STEPS: LR * 0.01, T - 1: LR * 0.01,
    })


def test_multi_step_uses_the_given_gamma():
    lrs = curve("multi_step", num_warn_up=0, milestones=[4], gamma=0.5)
    assert_points(lrs, {0: LR, 4 * STEPS: LR * 0.5, T - 1: LR * 0.5})


def test_step_decays_every_step_size_epochs():
    lrs = curve("step", step_size=3)
    assert_points(lrs, {
        0: LR * 0.01, W: LR, 3 * STEPS - 1: LR, 3 * STEPS: LR * 0.1,
        6 * STEPS: LR * 0.01, 9 * STEPS: LR * 0.001, T - 1: LR * 0.001,
    })


def test_cosine_follows_its_closed_form_down_to_the_floor():
    min_lr = 0.001
    cosine = lambda it: min_lr + (LR - min_lr) * (1 + math.cos(math.pi * it / T)) / 2  # noqa: E731
    lrs = curve("cosine", min_lr=min_lr, iterations=T + 1)
    target_at_w = cosine(W) / LR
    assert_points(lrs, {
        0: LR * 0.01, 5: warmup(5, target_at_w), W: cosine(W), 25: cosine(25), T - 1: cosine(T - 1), T: min_lr,
    })


def test_exp_decays_by_gamma_per_epoch_smoothly_per_iteration():
    lrs = curve("ExpLR", gamma=0.9)
    assert_points(lrs, {
        0: LR * 0.01, W: LR * 0.9 ** 2, 3 * STEPS: LR * 0.9 ** 3,
        3 * STEPS + 2: LR * 0.9 ** 3.4, T - 1: LR * 0.9 ** ((T - 1) / STEPS),
    })


def test_exp_defaults_to_gamma_0_95():
    lrs = curve("exp", num_warn_up=0)
    assert lrs[4 * STEPS] == pytest.approx(LR * 0.95 ** 4)


def test_poly_follows_its_closed_form():
    poly = lambda it: LR * (1 - it / T) ** 0.9  # noqa: E731
    lrs = curve("poly", iterations=T + 1)
    assert_points(lrs, {0: LR * 0.01, 5: warmup(5, poly(W) / LR), W: poly(W), 30: poly(30), T - 1: poly(T - 1), T: 0.0})


def test_poly_stops_at_its_floor():
    lrs = curve("poly", num_warn_up=0, iterations=T + 1, power=2.0, min_lr=0.01)
    assert_points(lrs, {20: 0.01 + 0.09 * (1 - 20 / T) ** 2, T: 0.01})


def test_one_cycle_rises_then_anneals_like_onecyclelr():
    rise = 0.3 * T  # pct_start
    start, end = LR / 25, LR / 25 / 1e4  # div_factor, final_div_factor
    lrs = curve("LambdaLR", num_warn_up=0, iterations=T + 1)
    assert_points(lrs, {
        0: start,
        7: LR + (start - LR) * (1 + math.cos(math.pi * 7 / rise)) / 2,
        15: LR,
        30: end + (LR - end) * (1 + math.cos(math.pi * (30 - rise) / (T - rise))) / 2,
        T: end,
    })


def test_constant_stays_at_lr_init_after_warm_up():
    lrs = curve("constant")
    assert_points(lrs, {0: LR * 0.01, W: LR, T - 1: LR})


def test_no_warm_up_starts_at_lr_init():
    assert curve("multi-step", num_warn_up=0, iterations=1, milestones=[4]) == [LR]


def test_fractional_warm_up_is_counted_in_iterations():
    lrs = curve("constant", num_warn_up=0.4, iterations=4)  # 0.4 * 5 = 2 iterations
    assert lrs == pytest.approx([LR * 0.01, LR * 0.505, LR, LR])


def test_warm_up_start_factor_is_configurable():
    assert curve("constant", iterations=1, warmup_start_factor=0.1) == pytest.approx([LR * 0.1])


@pytest.mark.parametrize("name", ALL_NAMES)
def test_warm_up_rises_monotonically_across_epoch_boundaries(name):
    lrs = curve(name, iterations=W + 1, **NEEDED)
    assert all(later > earlier for earlier, later in zip(lrs[:W], lrs[1:W]))
    assert lrs[STEPS] > lrs[STEPS - 1]  # no reset when the second epoch starts


@pytest.mark.parametrize("name", ALL_NAMES)
def test_lr_is_never_negative(name):
    assert min(curve(name, iterations=T + 3, **NEEDED)) >= 0.0


@pytest.mark.parametrize("name", ALL_NAMES)
def test_resume_mid_schedule_continues_the_same_curve(name):
    stop = 23
    uninterrupted = curve(name, **NEEDED)

    optimizer = make_optimizer()
    first = get_scheduler(name, optimizer, LR, EPOCHS, STEPS, num_warn_up=2, **NEEDED)
    lrs_per_iteration(first, optimizer, stop)
    saved = io.BytesIO()
    torch.save(first.state_dict(), saved)
    saved.seek(0)

    fresh_optimizer = make_optimizer()
    resumed = get_scheduler(name, fresh_optimizer, LR, EPOCHS, STEPS, num_warn_up=2, **NEEDED)
    resumed.load_state_dict(torch.load(saved, weights_only=True))
    assert lrs_per_iteration(resumed, fresh_optimizer, T - stop) == pytest.approx(uninterrupted[stop:], rel=1e-12)


def test_state_dict_holds_only_plain_values():
    callback = get_scheduler("cosine", make_optimizer(), LR, EPOCHS, STEPS, num_warn_up=1)

    def plain(value):
        if isinstance(value, dict):
            return all(isinstance(k, str) and plain(v) for k, v in value.items())
        if isinstance(value, list):
            return all(plain(v) for v in value)
        return value is None or isinstance(value, (bool, int, float))

    assert plain(callback.state_dict())


@pytest.mark.parametrize("name", ALL_NAMES)
def test_two_param_groups_keep_their_lr_ratio(name):
    optimizer = make_optimizer(0.1, 0.01)
    callback = get_scheduler(name, optimizer, LR, EPOCHS, STEPS, num_warn_up=2, **NEEDED)
    for _ in range(T):
        head, backbone = (group["lr"] for group in optimizer.param_groups)
        assert head == pytest.approx(10 * backbone, rel=1e-12)
        optimizer.step()
        callback.on_batch_end(0, {})


def test_lr_init_is_the_reference_when_groups_share_one_lr():
    optimizer = make_optimizer(0.5)
    callback = get_scheduler("constant", optimizer, 0.2, EPOCHS, STEPS)
    assert lrs_per_iteration(callback, optimizer, 2) == [0.2, 0.2]


def test_stepping_before_any_optimizer_step_gives_no_warning():
    # With gradient accumulation the first batches end without an optimizer step.
    callback = get_scheduler("cosine", make_optimizer(), LR, EPOCHS, STEPS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        callback.on_batch_end(0, {})
        callback.on_batch_end(1, {})
    assert [str(w.message) for w in caught] == []


def test_callback_list_dispatches_batch_end_to_the_scheduler():
    optimizer = make_optimizer()
    callback = get_scheduler("constant", optimizer, LR, EPOCHS, STEPS, num_warn_up=2)
    optimizer.step()
    CallbackList([callback]).fire("on_batch_end", 0, {})
    assert callback.iteration == 1 and optimizer.param_groups[0]["lr"] == pytest.approx(warmup(1, 1.0))


@pytest.mark.parametrize("alias, canonical", [
    ("MULTI-STEP", "multi-step"), ("MultiStepLR", "multi-step"), ("CosineAnnealingLR", "cosine"),
    ("exp", "ExpLR"), ("onecycle", "LambdaLR"), ("StepLR", "step"),
])
def test_names_are_case_insensitive_and_accept_old_spellings(alias, canonical):
    assert curve(alias, **NEEDED) == curve(canonical, **NEEDED)


def test_unknown_name_is_a_config_error_listing_the_known_ones():
    with pytest.raises(ConfigError, match="multi-step, step, cosine"):
        get_scheduler("warm-restarts", make_optimizer(), LR, EPOCHS, STEPS)


def test_multi_step_without_milestones_is_a_config_error():
    with pytest.raises(ConfigError, match="milestones"):
        get_scheduler("multi-step", make_optimizer(), LR, EPOCHS, STEPS)


def test_step_without_step_size_is_a_config_error():
    with pytest.raises(ConfigError, match="step_size"):
        get_scheduler("step", make_optimizer(), LR, EPOCHS, STEPS)


def test_a_warm_up_longer_than_training_is_cut_to_the_run_with_a_warning(caplog):
    # old configs warm up for 3 epochs: a 1-epoch run of them must still run
    with caplog.at_level("WARNING", logger="basetrainer"):
        longer = get_scheduler("constant", make_optimizer(), LR, EPOCHS, STEPS, num_warn_up=EPOCHS + 1)
    whole_run = get_scheduler("constant", make_optimizer(), LR, EPOCHS, STEPS, num_warn_up=EPOCHS)
    assert [longer.lr_factor(it) for it in range(EPOCHS * STEPS)] == [whole_run.lr_factor(it)
                                                                        for it in range(EPOCHS * STEPS)]
    assert [r.getMessage() for r in caplog.records] == [
        f"num_warn_up={EPOCHS + 1} epochs is longer than the run's {EPOCHS} epochs: warming up over the whole run"]


def test_a_warm_up_into_a_decay_that_leaves_little_time_at_the_set_lr_is_warned_about(caplog):
    # The detection task for 1 epoch with a 1-epoch warm-up: the lr rises into a cosine already at its end.
    with caplog.at_level("WARNING", logger="basetrainer"):
        get_scheduler("cosine", make_optimizer(), LR, 1, STEPS, num_warn_up=1)
    assert [r.getMessage() for r in caplog.records] == [
        "the lr schedule (cosine over 1 epochs of 5 batches | warm-up 1 epochs) keeps the lr at half its set value "
        "or more for only 0% of the run: num_warn_up and the decay leave little training at the set lr; check them "
        "against the run's length (they count epochs)"]


@pytest.mark.parametrize("run, auto, stated", [
    ({"num_epochs": 12}, {"num_warn_up": "auto"}, {"num_warn_up": 1}),  # one epoch
    ({"num_epochs": 1}, {"num_warn_up": "auto"}, {"num_warn_up": 0.1}),  # or a tenth of the run when shorter
    ({"num_epochs": 1, "max_iters": 30}, {"num_warn_up": "auto"}, {"num_warn_up": 3}),
    ({"num_epochs": 1, "max_iters": 1000}, {"num_warn_up": "auto"}, {"num_warn_up": STEPS}),
    ({"num_epochs": 12}, {"milestones": "auto"}, {"milestones": [6, 9]}),  # half and three quarters of the run
    ({"num_epochs": 12, "max_iters": 400}, {"milestones": "auto"}, {"milestones": [200, 300]}),
])
def test_auto_warm_up_and_milestones_are_the_same_share_of_a_run_in_epochs_or_steps(run, auto, stated):
    name = "multi-step" if "milestones" in auto else "cosine"
    curves = [get_scheduler(name, make_optimizer(), LR, run["num_epochs"], STEPS, max_iters=run.get("max_iters"),
                            **{"milestones": [6, 9], **settings}) for settings in (auto, stated)]
    length = run.get("max_iters") or run["num_epochs"] * STEPS
    assert [curves[0].lr_factor(it) for it in range(length)] == [curves[1].lr_factor(it) for it in range(length)]


def test_the_default_cosine_schedule_warns_of_nothing(caplog):
    with caplog.at_level("WARNING", logger="basetrainer"):
        get_scheduler("cosine", make_optimizer(), LR, 12, 22, num_warn_up=1)
    assert not caplog.records


def test_a_negative_warm_up_is_a_config_error():
    with pytest.raises(ConfigError, match="num_warn_up must be >= 0"):
        get_scheduler("cosine", make_optimizer(), LR, EPOCHS, STEPS, num_warn_up=-1)


def test_with_max_iters_the_schedule_counts_optimizer_steps_in_milestones_and_warm_up():
    trainer = ToyTrainer(toy_cfg(num_epochs=None, max_iters=20, accumulate_grad_batches=2, lr=0.1))
    schedule = get_scheduler("multi-step", trainer.optimizer, 0.1, None, trainer.num_batches, milestones=[10, 15],
                             num_warn_up=4, max_iters=20)
    lrs = []

    class RecordLr(Callback):
        def on_batch_end(self, batch, logs=None):
            if not self.state.accumulating:
                lrs.append(self.trainer.optimizer.param_groups[0]["lr"])

    trainer.callbacks = [schedule, RecordLr()]
    trainer.run()
    expected = [0.1 * schedule.lr_factor(step) for step in range(1, 21)]  # the lr set after each step
    assert lrs == pytest.approx(expected)
    assert expected[2] < expected[4] == pytest.approx(0.1) and expected[9] == pytest.approx(0.01)
