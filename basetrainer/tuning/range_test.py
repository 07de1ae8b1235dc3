"""The learning-rate range test (Smith 2017; the sweep of fastai's ``lr_find`` and Lightning's ``Tuner.lr_find``).

From ``min_lr`` to ``max_lr`` over ``num_steps`` optimizer steps, the lr grows exponentially, one step per lr,
on the trainer's training loader (cycled when it is short). The loss of each step is smoothed exponentially,
with the bias correction of Adam's moments, so that the first points are not pulled towards zero.

The sweep stops once it has diverged (:class:`Divergence`): a loss that is not finite, the smoothed loss above
``diverge`` times its lowest value, or the median of the last :data:`DIVERGED_WINDOW` losses above that or well
above where the sweep started (a diverged network's loss often levels off, and its smoothed loss with it, below
the first threshold).

The suggestion (:func:`suggest`) is where the smoothed loss falls fastest against log lr (its most negative
gradient), among the points after the first tenth of the planned steps and before the lowest smoothed loss:
where the loss still falls. Then the trainer is put back exactly as it was
(:class:`~basetrainer.tuning.snapshot.TrainerSnapshot`): a run after the test trains as one without it would.
"""
import dataclasses
import math
from typing import List, Optional

import numpy as np

from .tool_settings import check_lr_find
from .snapshot import TrainerSnapshot
from .steps import optimizer_steps

#: The raw losses whose median :class:`Divergence` compares with its thresholds: enough that one step's dip does
#: not hide a divergence and one step's spike does not fake one.
DIVERGED_WINDOW = 5
#: How far above where the sweep started (the median of its first :data:`DIVERGED_WINDOW` losses) the recent
#: losses may go before the sweep has diverged: the model is then worse than the untrained one by half again.
ABOVE_START = 1.5


@dataclasses.dataclass
class LRFindResult:
    """The sweep: one entry per step taken in ``lrs``, ``losses`` (each step's loss, averaged over ranks) and
    ``smoothed``; ``suggestion`` (None when too few points were left to tell); ``stopped``: why it ended early
    (None when it ran all ``num_steps``); ``lr_scale``: the factor ``lr_scaling`` multiplies the config's lr by
    for this global batch (the sweep's rates are the optimizer's, so the config's lr is the suggestion over it)."""

    lrs: List[float]
    losses: List[float]
    smoothed: List[float]
    suggestion: Optional[float]
    num_steps: int
    stopped: Optional[str] = None
    lr_scale: float = 1.0

    @property
    def lowest(self) -> Optional[float]:
        """The lr of the lowest smoothed loss, below which the suggestion lies; None before any step."""
        return self.lrs[int(np.argmin(self.smoothed))] if self.smoothed else None

    @property
    def override(self) -> Optional[str]:
        """The suggestion as a ``key=value`` override for ``basetrainer train``, before ``lr_scaling`` scales it
        (None without one)."""
        return None if self.suggestion is None else f"lr={self.suggestion / self.lr_scale:.3g}"

    def rows(self) -> list:
        """One dict per step: ``step``, ``lr``, ``loss``, ``smoothed_loss``."""
        return [{"step": step, "lr": lr, "loss": loss, "smoothed_loss": smoothed}
                for step, (lr, loss, smoothed) in enumerate(zip(self.lrs, self.losses, self.smoothed), start=1)]

    def summary(self) -> str:
        """One line: the range swept, where and why it stopped, and the suggestion."""
        span = f"{len(self.lrs)} of {self.num_steps} steps" + \
            (f" from lr {self.lrs[0]:.3g} to {self.lrs[-1]:.3g}" if self.lrs else "")
        stopped = f", stopped: {self.stopped}" if self.stopped else ""
        scaled = f" (the optimizer's lr {self.suggestion:.3g} over lr_scaling's factor {self.lr_scale:.3g})" \
            if self.suggestion is not None and self.lr_scale != 1.0 else ""
        if self.suggestion is not None:
            found = f"lowest loss at lr {self.lowest:.3g}; steepest descent before it at {self.override}{scaled}"
        elif self.lrs and self.lrs.index(self.lowest) <= self.num_steps // 10:
            found = (f"no suggestion (the loss was lowest at lr {self.lowest:.3g}, within the first tenth of the "
                     f"sweep: lower min_lr)")
        else:
            found = "no suggestion (too few steps before the loss diverged: lower max_lr or raise num_steps)"
        return f"lr range test: {span}{stopped}; {found}"


def sweep_lrs(min_lr: float, max_lr: float, num_steps: int) -> List[float]:
    """The ``num_steps`` learning rates, from ``min_lr`` to ``max_lr``, each a constant factor above the last."""
    return [min_lr * (max_lr / min_lr) ** (step / (num_steps - 1)) for step in range(num_steps)]


def suggest(lrs, smoothed, num_steps: int) -> Optional[float]:
    """The lr where ``smoothed`` falls fastest (its most negative gradient against the step, so against log lr)
    among the points where the loss still falls: after the first ``num_steps // 10`` and before the lowest point
    (never the last point, whose gradient is one-sided). None when no such point is left.

    Past the lowest point the loss is on its way to diverging, and a wiggle there (a diverged loss levelling
    off, a spike and its decay) may well be steeper than the real descent: a rate from there diverges."""
    skip_start = num_steps // 10
    values = np.asarray(smoothed, dtype=float)
    end = min(int(np.argmin(values)), len(values) - 1)
    if end - skip_start < 1:
        return None
    gradients = np.gradient(values)[skip_start:end]
    return float(lrs[skip_start + int(np.argmin(gradients))])


class Divergence:
    """The sweep's losses, smoothed, and when to stop: :meth:`add` each step's loss; it returns why the sweep has
    diverged, or None to go on.

    It has diverged when a loss is not finite, when the smoothed loss exceeds ``limit`` times its lowest value
    (fastai's and Lightning's rule), or when the median of the last :data:`DIVERGED_WINDOW` losses exceeds that,
    or :data:`ABOVE_START` times where the sweep started. The first rule alone misses a divergence whose loss
    levels off: with the default ``smooth`` of 0.98 the smoothed loss then settles at that level, which may lie
    below ``limit`` times the lowest while the model is far worse than when the sweep began, and the sweep would
    go on to its end (the digits' quick start, one thread: a level near 5.4 against a threshold of 7.1). A
    median needs most of the window above a threshold, so one step's spike does not stop a sweep that is still
    descending, and it reacts without the smoothing's lag."""

    def __init__(self, smooth: float, limit: float):
        self.beta, self.limit = smooth, limit
        self.losses, self.smoothed = [], []
        self._average, self._lowest = 0.0, math.inf

    def add(self, loss: float, lr: float) -> Optional[str]:
        if not math.isfinite(loss):
            return f"the loss was {loss} at lr {lr:.3g}"
        self._average = self.beta * self._average + (1 - self.beta) * loss
        value = self._average / (1 - self.beta ** (len(self.losses) + 1))
        self.losses.append(loss)
        self.smoothed.append(value)
        threshold, lowest = self.limit * self._lowest, self._lowest
        self._lowest = min(self._lowest, value)
        if value > threshold:
            return f"the smoothed loss {value:.4g} exceeded {self.limit:g} x its lowest {lowest:.4g} at lr {lr:.3g}"
        if len(self.losses) <= DIVERGED_WINDOW:
            return None
        recent = float(np.median(self.losses[-DIVERGED_WINDOW:]))
        start = float(np.median(self.losses[:DIVERGED_WINDOW]))
        if recent > threshold:
            return (f"the median of the last {DIVERGED_WINDOW} losses, {recent:.4g}, exceeded {self.limit:g} x the "
                    f"lowest smoothed loss {lowest:.4g} at lr {lr:.3g}")
        if recent > ABOVE_START * start:
            return (f"the median of the last {DIVERGED_WINDOW} losses, {recent:.4g}, exceeded {ABOVE_START:g} x "
                    f"the {start:.4g} the sweep started from at lr {lr:.3g}")
        return None


def lr_find(trainer, min_lr: float = 1e-7, max_lr: float = 10.0, num_steps: int = 100, smooth: float = 0.98,
            diverge: float = 4.0) -> LRFindResult:
    """Runs the range test on ``trainer`` (an ``EngineTrainer`` after ``build()``, before or between runs) and
    puts it back as it was. Every rank of a distributed job calls it; all sweep the same rates and read the same
    losses (averaged over ranks), so all stop at the same step and get the same result. A bad argument is a
    one-line ConfigError before any step."""
    options = check_lr_find({"min_lr": min_lr, "max_lr": max_lr, "num_steps": num_steps, "smooth": smooth,
                             "diverge": diverge}, "given to lr_find")
    lrs = sweep_lrs(options["min_lr"], options["max_lr"], options["num_steps"])
    divergence = Divergence(options["smooth"], options["diverge"])
    stopped = None
    with TrainerSnapshot(trainer):
        steps = optimizer_steps(trainer, trainer.train_loader)
        for lr in lrs:
            for group in trainer.optimizer.param_groups:
                group["lr"] = lr
            stopped = divergence.add(next(steps), lr)
            if stopped:
                break
        steps.close()
    swept = lrs[:len(divergence.smoothed)]
    return LRFindResult(swept, divergence.losses, divergence.smoothed,
                        suggest(swept, divergence.smoothed, options["num_steps"]), options["num_steps"], stopped,
                        _lr_scale(trainer))


def _lr_scale(trainer) -> float:
    """The factor ``lr_scaling`` gave the optimizer's lr at ``build()`` (1 when it scales nothing)."""
    scaling = getattr(trainer, "lr_scaling", None)
    return scaling.factor if scaling is not None and scaling.factor else 1.0
