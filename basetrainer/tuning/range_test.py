"""The learning-rate range test (Smith 2017, as fastai's ``lr_find`` and Lightning's ``Tuner.lr_find`` run it).

From ``min_lr`` to ``max_lr`` over ``num_steps`` optimizer steps, the lr grows exponentially, one step per lr,
on the trainer's training loader (cycled when it is short). The loss of each step is smoothed exponentially,
with the bias correction of Adam's moments, so that the first points are not pulled towards zero. The sweep
stops early once the smoothed loss exceeds ``diverge`` times its lowest value, or a loss is not finite. The
suggestion is where the smoothed loss falls fastest against log lr (its most negative gradient), leaving out
the first tenth of the planned steps and the last point, as Lightning does. Then the trainer is put back
exactly as it was (:class:`~basetrainer.tuning.snapshot.TrainerSnapshot`): a run after the test trains as one
without it would.
"""
import dataclasses
import math
from typing import List, Optional

import numpy as np

from .tool_settings import check_lr_find
from .snapshot import TrainerSnapshot
from .steps import optimizer_steps


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
        found = f"steepest descent of the loss at {self.override}{scaled}" if self.suggestion is not None else \
            "no suggestion (too few steps before the loss diverged: lower max_lr or raise num_steps)"
        return f"lr range test: {span}{stopped}; {found}"


def sweep_lrs(min_lr: float, max_lr: float, num_steps: int) -> List[float]:
    """The ``num_steps`` learning rates, from ``min_lr`` to ``max_lr``, each a constant factor above the last."""
    return [min_lr * (max_lr / min_lr) ** (step / (num_steps - 1)) for step in range(num_steps)]


def suggest(lrs, smoothed, num_steps: int) -> Optional[float]:
    """The lr where ``smoothed`` falls fastest (the most negative gradient against the step, so against log lr),
    leaving out the first ``num_steps // 10`` points and the last; None when fewer than 2 points remain."""
    skip_start = num_steps // 10
    candidates = np.asarray(smoothed[skip_start:-1], dtype=float)
    if len(candidates) < 2:
        return None
    return float(lrs[skip_start + int(np.argmin(np.gradient(candidates)))])


def lr_find(trainer, min_lr: float = 1e-7, max_lr: float = 10.0, num_steps: int = 100, smooth: float = 0.98,
            diverge: float = 4.0) -> LRFindResult:
    """Runs the range test on ``trainer`` (an ``EngineTrainer`` after ``build()``, before or between runs) and
    puts it back as it was. Every rank of a distributed job calls it; all sweep the same rates and read the same
    losses (averaged over ranks), so all stop at the same step and get the same result. A bad argument is a
    one-line ConfigError before any step."""
    options = check_lr_find({"min_lr": min_lr, "max_lr": max_lr, "num_steps": num_steps, "smooth": smooth,
                             "diverge": diverge}, "given to lr_find")
    lrs = sweep_lrs(options["min_lr"], options["max_lr"], options["num_steps"])
    beta, limit = options["smooth"], options["diverge"]
    swept, losses, smoothed, stopped = [], [], [], None
    average, best = 0.0, math.inf
    with TrainerSnapshot(trainer):
        steps = optimizer_steps(trainer, trainer.train_loader)
        for step, lr in enumerate(lrs):
            for group in trainer.optimizer.param_groups:
                group["lr"] = lr
            loss = next(steps)
            if not math.isfinite(loss):
                stopped = f"the loss was {loss} at lr {lr:.3g}"
                break
            average = beta * average + (1 - beta) * loss
            value = average / (1 - beta ** (step + 1))
            swept.append(lr)
            losses.append(loss)
            smoothed.append(value)
            if step and value > limit * best:
                stopped = f"the smoothed loss {value:.4g} exceeded {limit:g} x its lowest {best:.4g} at lr {lr:.3g}"
                break
            best = min(best, value)
        steps.close()
    return LRFindResult(swept, losses, smoothed, suggest(swept, smoothed, options["num_steps"]),
                        options["num_steps"], stopped, _lr_scale(trainer))


def _lr_scale(trainer) -> float:
    """The factor ``lr_scaling`` gave the optimizer's lr at ``build()`` (1 when it scales nothing)."""
    scaling = getattr(trainer, "lr_scaling", None)
    return scaling.factor if scaling is not None and scaling.factor else 1.0
