"""The old scheduler API: ``step(epoch, step)`` and the old classes, against ``get_scheduler``.

10 epochs of 5 batches, lr_init 0.1 throughout.
"""
import math

import pytest
import torch

from basetrainer.errors import ConfigError
from basetrainer.scheduler.build_scheduler import LRSchedulerCallback, get_scheduler
from basetrainer.scheduler.CosineAnnealingLR import CosineAnnealingLR, CosineLR
from basetrainer.scheduler.ExponentialLR import ExponentialLR
from basetrainer.scheduler.LambdaLR import LambdaLR
from basetrainer.scheduler.MultiStepLR import MultiStepLR
from basetrainer.scheduler.WarmUpLR import WarmUpLR

EPOCHS, STEPS, LR = 10, 5, 0.1


def make_optimizer():
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=LR)


def curve_by_batch_end(build):
    """The lr each batch trains with, the schedule stepped by ``on_batch_end`` as the trainer does."""
    optimizer = make_optimizer()
    scheduler = build(optimizer)
    used = []
    for it in range(EPOCHS * STEPS):
        used.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.on_batch_end(it % STEPS, {})
    return used


def curve_by_old_step(build):
    """The same, the schedule driven as the old loops did: ``step(epoch, step)`` after each batch."""
    optimizer = make_optimizer()
    scheduler = build(optimizer)
    used = []
    for epoch in range(EPOCHS):
        for step in range(STEPS):
            used.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step(epoch, step)
    return used


def ours(name, **options):
    return lambda optimizer: get_scheduler(name, optimizer, LR, EPOCHS, STEPS, **options)


OLD_AND_OURS = {
    "MultiStepLR": (lambda o: MultiStepLR(o, EPOCHS, STEPS, milestones=[4, 7], lr_init=LR, num_warn_up=2, gamma=0.5),
                    ours("multi-step", milestones=[4, 7], num_warn_up=2, gamma=0.5)),
    "CosineAnnealingLR": (lambda o: CosineAnnealingLR(o, EPOCHS, STEPS, lr_init=LR, num_warn_up=2),
                          ours("cosine", num_warn_up=2)),
    "CosineLR": (lambda o: CosineLR(o, EPOCHS, STEPS, lr_init=LR, num_warn_up=1), ours("cosine", num_warn_up=1)),
    "ExponentialLR": (lambda o: ExponentialLR(o, EPOCHS, STEPS, lr_init=LR, num_warn_up=1, decay=0.9),
                      ours("exp", num_warn_up=1, gamma=0.9 ** (50 / EPOCHS))),
    "LambdaLR": (lambda o: LambdaLR(o, EPOCHS, STEPS, lr_init=LR, lrf=0.2), ours("cosine", min_lr=0.2 * LR)),
    "LambdaLR-linear": (lambda o: LambdaLR(o, EPOCHS, STEPS, linear_lr=True, lr_init=LR, lrf=0.2),
                        ours("poly", power=1.0, min_lr=0.2 * LR)),
    "WarmUpLR": (lambda o: WarmUpLR(o, STEPS, lr_init=LR, num_warn_up=2), ours("constant", num_warn_up=2)),
}


@pytest.mark.parametrize("name", ["multi-step", "cosine", "exp", "one-cycle", "constant"])
def test_step_epoch_step_gives_the_curve_of_on_batch_end(name):
    build = ours(name, milestones=[4, 7], num_warn_up=2)
    assert curve_by_old_step(build) == curve_by_batch_end(build)


def test_step_jumps_to_the_position_it_names():
    optimizer = make_optimizer()
    scheduler = get_scheduler("cosine", optimizer, LR, EPOCHS, STEPS, num_warn_up=2)
    reference = curve_by_batch_end(ours("cosine", num_warn_up=2))
    scheduler.step(6, 2)
    scheduler.step(3, 1)  # going back is allowed: the lr is a function of the position
    assert optimizer.param_groups[0]["lr"] == reference[3 * STEPS + 1 + 1]
    assert scheduler.iteration == 3 * STEPS + 2 and scheduler.scheduler.get_last_lr() == [reference[17]]


def test_step_without_num_steps_is_a_config_error():
    scheduler = LRSchedulerCallback(make_optimizer(), lambda it: 1.0, LR)
    with pytest.raises(ConfigError, match="num_steps"):
        scheduler.step(0, 0)


@pytest.mark.parametrize("name", OLD_AND_OURS)
def test_old_scheduler_class_gives_the_curve_of_its_get_scheduler_equivalent(name):
    old, new = OLD_AND_OURS[name]
    assert curve_by_old_step(old) == curve_by_batch_end(new)


def test_old_lambda_lr_falls_from_lr_init_to_lrf_times_lr_init():
    lrs = curve_by_batch_end(OLD_AND_OURS["LambdaLR"][0])
    assert lrs[0] == pytest.approx(LR) and lrs[-1] == pytest.approx(0.2 * LR, rel=1e-2)
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


def test_old_exponential_lr_falls_by_decay_to_the_50th_over_the_run():
    lrs = curve_by_batch_end(lambda o: ExponentialLR(o, EPOCHS, STEPS, lr_init=LR, decay=0.9))
    last = EPOCHS * STEPS - 1
    assert lrs[last] == pytest.approx(LR * 0.9 ** (50 * last / (EPOCHS * STEPS)))


def test_old_warm_up_rises_to_lr_init_then_stays():
    lrs = curve_by_batch_end(OLD_AND_OURS["WarmUpLR"][0])
    warm = 2 * STEPS
    assert lrs[0] < 0.05 * LR and all(a < b for a, b in zip(lrs[:warm], lrs[1:warm + 1]))
    assert lrs[warm:] == [pytest.approx(LR)] * (len(lrs) - warm)


def test_old_multi_step_multiplies_by_gamma_at_each_milestone():
    lrs = curve_by_batch_end(lambda o: MultiStepLR(o, EPOCHS, STEPS, milestones=[4, 7], lr_init=LR, gamma=0.5))
    assert [lrs[e * STEPS] for e in (3, 4, 6, 7)] == [pytest.approx(v) for v in (LR, LR / 2, LR / 2, LR / 4)]


def test_old_cosine_with_several_cycles_is_a_config_error():
    with pytest.raises(ConfigError, match="CosineAnnealingWarmRestarts"):
        CosineAnnealingLR(make_optimizer(), EPOCHS, STEPS, num_cycles=2, num_warn_up=0)


def test_the_old_test_scheduler_loop_runs():
    """The loop of the old library's test/test_scheduler.py: on_epoch_begin without logs, then step per batch.
    Needs the Callback base class whose hooks take logs as optional."""
    optimizer = make_optimizer()
    scheduler = get_scheduler("cosine", optimizer=optimizer, lr_init=LR, num_epochs=EPOCHS, num_steps=STEPS,
                              milestones=[], num_warn_up=2)
    per_epoch = []
    for epoch in range(EPOCHS):
        scheduler.on_epoch_begin(epoch)
        for step in range(STEPS):
            scheduler.step(epoch, step)
        per_epoch.append(optimizer.param_groups[0]["lr"])
    reference = curve_by_batch_end(ours("cosine", num_warn_up=2))
    assert per_epoch[:-1] == [reference[(e + 1) * STEPS] for e in range(EPOCHS - 1)]
    assert per_epoch[-1] == pytest.approx(0.0, abs=1e-12) and not math.isnan(per_epoch[-1])
