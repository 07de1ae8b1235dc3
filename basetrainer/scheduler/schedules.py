"""Learning-rate schedules as closed-form factors of the global iteration.

Each function here returns ``factor(it)``, where ``it`` counts training batches from the
start of training (0-based, never reset at epoch boundaries); the learning rate of a
param group is ``base_lr * factor(it)``. With ``S`` batches per epoch and
``T = num_epochs * S`` in all (``p = min(it, T) / T``)::

    constant     1
    multi_step   gamma ** (number of milestones m with it >= m * S)
    step         gamma ** floor(it / (step_size * S))
    exponential  gamma ** (it / S)            smooth: equals gamma ** epoch at each epoch start
    cosine       floor + (1 - floor) * (1 + cos(pi * p)) / 2
                 with c cycles and a decay d (the earlier library's CosineLR): cos(pi * (2c - 1) * p),
                 down and up c - 1 times before the last fall, times d ** ((c - 0.5) * p)
    poly         floor + (1 - floor) * (1 - p) ** power
    one_cycle    cos-anneal from 1/div_factor up to 1 over the first pct_start * T iterations,
                 then down to 1/(div_factor * final_div_factor) at T (as OneCycleLR,
                 anneal_strategy="cos")

The main schedule's clock starts at 0, not at the end of warm-up, so milestones are plain
epoch numbers. ``with_linear_warmup`` replaces the first ``W`` iterations by a straight
line from ``start_factor`` to the main schedule's value at ``W``.
"""
import bisect
import math
from typing import Callable, Sequence

Factor = Callable[[int], float]


def constant() -> Factor:
    return lambda it: 1.0


def multi_step(milestone_iters: Sequence[int], gamma: float) -> Factor:
    milestone_iters = sorted(milestone_iters)
    return lambda it: gamma ** bisect.bisect_right(milestone_iters, it)


def step(step_iters: int, gamma: float) -> Factor:
    return lambda it: gamma ** (it // step_iters)


def exponential(iters_per_epoch: int, gamma: float) -> Factor:
    return lambda it: gamma ** (it / iters_per_epoch)


def cosine(total_iters: int, floor: float, num_cycles: int = 1, decay: float = 1.0) -> Factor:
    half_waves = 2 * num_cycles - 1

    def factor(it: int) -> float:
        progress = _progress(it, total_iters)
        return _cos_anneal(1.0, floor, half_waves * progress) * decay ** ((num_cycles - 0.5) * progress)

    return factor


def poly(total_iters: int, power: float, floor: float) -> Factor:
    return lambda it: floor + (1.0 - floor) * (1.0 - _progress(it, total_iters)) ** power


def one_cycle(total_iters: int, pct_start: float, div_factor: float, final_div_factor: float) -> Factor:
    start, end = 1.0 / div_factor, 1.0 / (div_factor * final_div_factor)
    rise_iters = pct_start * total_iters

    def factor(it: int) -> float:
        if it < rise_iters:
            return _cos_anneal(start, 1.0, it / rise_iters)
        return _cos_anneal(1.0, end, _progress(it - rise_iters, total_iters - rise_iters))

    return factor


def with_linear_warmup(main: Factor, warmup_iters: int, start_factor: float) -> Factor:
    """``main`` preceded by a linear ramp over ``warmup_iters``; never negative."""
    if warmup_iters <= 0:
        return lambda it: max(0.0, main(it))
    target = main(warmup_iters)

    def factor(it: int) -> float:
        if it < warmup_iters:
            return max(0.0, start_factor + (target - start_factor) * it / warmup_iters)
        return max(0.0, main(it))

    return factor


def _progress(it: float, total: float) -> float:
    return min(max(it / total, 0.0), 1.0) if total > 0 else 1.0


def _cos_anneal(start: float, end: float, progress: float) -> float:
    return end + (start - end) * (1.0 + math.cos(math.pi * progress)) / 2.0
