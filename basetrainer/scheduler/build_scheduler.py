"""Learning-rate schedules by name, as callbacks that step once per training batch.

The closed forms are in :mod:`basetrainer.scheduler.schedules`.
"""
import copy
import numbers
import warnings
from typing import Optional, Sequence

import torch
from torch.optim.lr_scheduler import LambdaLR

from ..engine.events import HIGHEST, Callback
from ..errors import ConfigError
from ..utils.log import get_logger
from ..utils.names import lookup_name
from . import schedules

logger = get_logger()

# Spellings users write (case, "-" and "_" ignored) -> the schedule they mean.
_NAMES = {
    "multistep": "multi-step", "multisteplr": "multi-step",
    "step": "step", "steplr": "step",
    "cosine": "cosine", "cos": "cosine", "cosinelr": "cosine", "cosineannealinglr": "cosine",
    "exp": "exp", "explr": "exp", "exponential": "exp", "exponentiallr": "exp",
    "poly": "poly", "polylr": "poly", "polynomial": "poly", "polynomiallr": "poly",
    "onecycle": "one-cycle", "onecyclelr": "one-cycle", "lambdalr": "one-cycle",
    "constant": "constant", "fixed": "constant",
}
KNOWN_SCHEDULERS = "multi-step, step, cosine, exp (ExpLR), poly, one-cycle (LambdaLR), constant"
#: What ``milestones: auto`` means: these shares of the run (half and three quarters: epochs 6 and 9 of 12).
AUTO_MILESTONES = (0.5, 0.75)
#: What ``num_warn_up: auto`` means: one epoch, or this share of the run when that is shorter.
AUTO_WARM_UP_SHARE = 0.1
#: Below this share of the run at half the set lr or more, the schedule warns that it leaves little training there.
NEAR_SET_LR = 0.25


class LRSchedulerCallback(Callback):
    """Sets every param group's lr from ``lr_factor(it)`` before each training batch.

    Wraps ``torch.optim.lr_scheduler.LambdaLR``: group g trains batch ``it`` (counted from
    the start of training, never reset per epoch) with ``base_lr[g] * lr_factor(it)``, so
    groups keep the ratio between their lrs. The base lrs are the groups' own
    (``initial_lr``, else ``lr``) when they differ, else ``lr_init``. It steps once per
    training batch, in ``on_batch_end`` (the trainer publishes the lr each step used in
    ``logs["lr"]``). ``state_dict`` holds plain numbers only;
    ``load_state_dict`` also puts the restored iteration's lr into the optimizer.

    Attached to a trainer, the clock is read off where training stands rather than counted:
    after batch ``b`` of epoch ``e`` it is ``e * num_steps + b + 1``, the same number the
    count gives. When the loader's batches per epoch are not ``num_steps`` (a run resumed on
    another number of processes keeps its global batch, and so its epochs, but splits them
    into other batches), batches are scaled to ``num_steps`` per epoch, so the curve still
    follows the epochs it was built for.

    With ``per_optimizer_step`` (training for ``max_iters``) the clock is the trainer's global
    step instead: after each batch the lr is the schedule's at ``state.global_step``, so
    batches that only accumulate gradients, and skipped steps, do not advance it.

    Loops written for earlier versions call ``step(epoch, step)`` after each batch instead;
    that needs ``num_steps``, the batches per epoch (:func:`get_scheduler` passes it).
    """

    priority = HIGHEST

    def __init__(self, optimizer: torch.optim.Optimizer, lr_factor: schedules.Factor, lr_init: Optional[float] = None,
                 num_steps: Optional[int] = None, per_optimizer_step: bool = False):
        super().__init__()
        self.optimizer = optimizer
        self.lr_factor = lr_factor
        self.num_steps = num_steps
        self.per_optimizer_step = per_optimizer_step
        for group, base_lr in zip(optimizer.param_groups, _base_lrs(optimizer, lr_init)):
            group["initial_lr"] = base_lr
        # lr_factor is a plain function, so LambdaLR's state_dict stores None for it.
        self.scheduler = LambdaLR(optimizer, lr_factor)

    @property
    def iteration(self) -> int:
        """The global iteration whose lr the optimizer holds now."""
        return self.scheduler.last_epoch

    def on_train_begin(self, logs: Optional[dict] = None):
        position = self._position(self.state.start_epoch, self.state.start_batch) if self.state else None
        if position is not None and position != self.scheduler.last_epoch:  # a resume on another layout
            self._go_to(position)

    def on_batch_end(self, batch: int, logs: Optional[dict] = None):
        position = self._position(self.state.epoch, batch + 1) if self.state else None
        if self.per_optimizer_step:
            self._go_to(self.state.global_step)
        elif position is not None:
            self._go_to(position)
        elif self.scheduler.last_epoch == 0:
            # torch warns when its first step precedes optimizer.step(); here that is by design:
            # the schedule counts batches, also those that only accumulate gradients.
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Detected call of `lr_scheduler.step", UserWarning)
                self.scheduler.step()
        else:
            self.scheduler.step()

    def step(self, epoch: int = 0, step: int = 0) -> None:
        """Sets the lr that follows batch ``step`` of ``epoch``, as ``on_batch_end`` there would.

        The API of earlier versions, for loops that drive the schedule themselves. The lr is a
        closed form of the iteration, so this jumps to ``epoch * num_steps + step + 1``:
        repeated or out-of-order calls give the same lr for the same position.
        """
        if not self.num_steps:
            raise ConfigError("step(epoch, step) needs the batches per epoch: build the schedule with "
                              "get_scheduler(..., num_steps=...), or call on_batch_end after each batch")
        self._go_to(epoch * self.num_steps + step + 1)

    def state_dict(self) -> dict:
        return copy.deepcopy(self.scheduler.state_dict())

    def load_state_dict(self, state: dict) -> None:
        self.scheduler.load_state_dict(dict(state))
        # The optimizer may have been built afresh (or loaded from elsewhere): give it the
        # lr of the restored iteration so the next batch continues the same curve.
        for group, base_lr in zip(self.optimizer.param_groups, self.scheduler.base_lrs):
            group["initial_lr"] = base_lr
        self._go_to(self.scheduler.last_epoch)

    def _position(self, epoch: int, batch: int):
        """The clock at ``batch`` batches into ``epoch``, in epochs of ``num_steps`` batches; None
        where the trainer's batches per epoch are unknown (or ``num_steps`` is), or the clock is steps."""
        per_epoch = self.state.batches_per_epoch
        if self.per_optimizer_step or not self.num_steps or not per_epoch:
            return None
        if per_epoch == self.num_steps:
            return epoch * self.num_steps + batch
        return epoch * self.num_steps + batch * self.num_steps / per_epoch

    def _go_to(self, iteration: int) -> None:
        """Puts the schedule and every param group at ``iteration``. The base is each group's ``initial_lr``
        (torch's convention), which a resumed run's ``lr_scaling`` may have set anew since the schedule's was saved."""
        factor = self.lr_factor(iteration)
        self.scheduler.base_lrs = [group.get("initial_lr", base_lr) for group, base_lr
                                   in zip(self.optimizer.param_groups, self.scheduler.base_lrs)]
        for group, base_lr in zip(self.optimizer.param_groups, self.scheduler.base_lrs):
            group["lr"] = base_lr * factor
        self.scheduler.last_epoch = iteration
        self.scheduler._last_lr = [group["lr"] for group in self.optimizer.param_groups]


def schedule_name(scheduler: str) -> str:
    """The schedule ``scheduler`` names (case, ``-``, ``_`` and spaces ignored); a ConfigError listing them otherwise."""
    return lookup_name(_NAMES, scheduler, "scheduler", KNOWN_SCHEDULERS)


def get_scheduler(
    scheduler: str,
    optimizer: torch.optim.Optimizer,
    lr_init: Optional[float],
    num_epochs: int,
    num_steps: int,
    milestones: Optional[Sequence[float]] = None,
    num_warn_up: float = 0,
    *,
    max_iters: Optional[int] = None,
    gamma: Optional[float] = None,
    step_size: Optional[float] = None,
    min_lr: float = 0.0,
    power: float = 0.9,
    pct_start: float = 0.3,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
    warmup_start_factor: float = 0.01,
    num_cycles: int = 1,
    decay: Optional[float] = None,
) -> LRSchedulerCallback:
    """An lr schedule over ``num_epochs`` epochs of ``num_steps`` batches, as a callback.

    ``scheduler`` names the main schedule (case-insensitive): multi-step (``milestones``
    in epochs, ``gamma`` 0.1), step (every ``step_size`` epochs, ``gamma`` 0.1), cosine
    (down to ``min_lr``), exp (``gamma`` 0.95 per epoch, applied smoothly per batch),
    poly (``power``, down to ``min_lr``), one-cycle alias LambdaLR (``pct_start``,
    ``div_factor``, ``final_div_factor`` as in ``torch.optim.lr_scheduler.OneCycleLR``)
    or constant. The first ``num_warn_up`` epochs (may be fractional) ramp linearly, per
    batch, from ``warmup_start_factor * lr_init`` to the main schedule's value there; a
    warm-up longer than the run is cut to the run, with a warning. ``num_warn_up="auto"`` is one epoch, or a tenth of the run when that is shorter;
    ``milestones="auto"`` is half and three quarters of the run: neither changes meaning with the
    run's unit. The log says what the schedule does in the units its settings were read in, and warns
    when it keeps the lr at half its set value or more for under a quarter of the run.
    ``min_lr`` is relative to ``lr_init``; other param groups floor at the same fraction.

    The earlier library's ``num_cycles`` and ``decay`` keep their meaning: cosine goes down
    and up again ``num_cycles - 1`` times before its last fall, its amplitude damped to
    ``decay ** (num_cycles - 0.5)`` at the end; for exp, ``decay`` is the fall over the
    whole run to the 50th power (``gamma = decay ** (50 / num_epochs)`` per epoch). Other
    schedules ignore them, with a warning, as the earlier library did.

    With ``max_iters`` (training for that many optimizer steps) the schedule runs over the
    steps instead: ``milestones``, ``step_size`` and ``num_warn_up`` given as numbers count steps, exp
    decays by ``gamma`` every ``step_size`` steps, and ``num_epochs``/``num_steps`` are
    not used.
    """
    name = schedule_name(scheduler)
    unit = "epochs"
    num_warn_up = _auto_warm_up(num_warn_up, num_epochs, num_steps, max_iters)
    if max_iters is not None:  # one step is the unit: a run of max_iters "epochs" of one step each
        num_epochs, num_steps, unit = max_iters, 1, "steps"
        if name == "exp" and not step_size:
            raise ConfigError("scheduler exp with max_iters needs step_size: the steps over which lr is multiplied "
                              "by gamma")
    milestones = _auto_milestones(milestones, num_epochs)
    for key, value in (("max_iters" if max_iters is not None else "num_epochs", num_epochs), ("num_steps", num_steps)):
        if not isinstance(value, numbers.Integral) or value < 1:
            raise ConfigError(f"{key} must be a positive integer, got {value!r}")
    num_warn_up = num_warn_up or 0
    if num_warn_up < 0:
        raise ConfigError(f"num_warn_up must be >= 0, got {num_warn_up}")
    if num_warn_up > num_epochs:
        logger.warning("num_warn_up=%g %s is longer than the run's %d %s: warming up over the whole run",
                       num_warn_up, unit, num_epochs, unit)
        num_warn_up = num_epochs
    if gamma is not None and gamma <= 0:
        raise ConfigError(f"gamma must be > 0, got {gamma}")
    gamma = _earlier_decay(name, num_cycles, decay, gamma, num_epochs, step_size if max_iters is not None else 1)
    total = int(num_epochs * num_steps)

    if name == "multi-step":
        if not milestones:
            raise ConfigError("scheduler multi-step needs milestones: the epochs where lr is multiplied by gamma")
        milestones = [milestones] if isinstance(milestones, (int, float)) else milestones
        main = schedules.multi_step([round(m * num_steps) for m in milestones], 0.1 if gamma is None else gamma)
    elif name == "step":
        if not step_size or step_size <= 0:
            raise ConfigError("scheduler step needs step_size > 0: the number of epochs between decays")
        main = schedules.step(max(1, round(step_size * num_steps)), 0.1 if gamma is None else gamma)
    elif name == "exp":
        main = schedules.exponential(step_size if max_iters is not None else num_steps, 0.95 if gamma is None else gamma)
    elif name == "cosine":
        main = schedules.cosine(total, _floor(min_lr, lr_init, optimizer), num_cycles, 1.0 if decay is None else decay)
    elif name == "poly":
        main = schedules.poly(total, power, _floor(min_lr, lr_init, optimizer))
    elif name == "one-cycle":
        if not 0 < pct_start < 1:
            raise ConfigError(f"pct_start must lie strictly between 0 and 1, got {pct_start}")
        main = schedules.one_cycle(total, pct_start, div_factor, final_div_factor)
    else:
        main = schedules.constant()

    factor = schedules.with_linear_warmup(main, round(num_warn_up * num_steps), warmup_start_factor)
    say_schedule(name, factor, total, num_steps, unit, num_warn_up, milestones if name == "multi-step" else None)
    return LRSchedulerCallback(optimizer, factor, lr_init, num_steps=num_steps, per_optimizer_step=max_iters is not None)


def say_schedule(name, factor, total, num_steps, unit, num_warn_up, milestones) -> None:
    """Logs what the schedule does, in the units its settings were read in (epochs, or steps under ``max_iters``),
    and warns when it leaves the run little time near the set lr: under :data:`NEAR_SET_LR` of its iterations at
    half the set value or more (a multi-step schedule whose milestones came early, a long warm-up into a decay)."""
    per_unit = f" of {num_steps} batches" if unit == "epochs" else ""
    parts = [f"{name} over {total // max(num_steps, 1)} {unit}{per_unit}"]
    if num_warn_up:
        parts.append(f"warm-up {num_warn_up:g} {unit}")
    if milestones:
        parts.append(f"lr x gamma at {unit} {', '.join(f'{m:g}' for m in sorted(milestones))}")
    near = _share_near_set_lr(factor, total)
    parts.append(f"{100 * near:.0f}% of the run at half the set lr or more")
    logger.info("lr schedule: %s", " | ".join(parts))
    if near < NEAR_SET_LR:
        logger.warning("the lr schedule (%s) keeps the lr at half its set value or more for only %.0f%% of the run: "
                       "num_warn_up and %s leave little training at the set lr; check them against the run's "
                       "length (they count %s)", " | ".join(parts[:-1]), 100 * near,
                       "milestones" if milestones else "the decay", unit)


def _share_near_set_lr(factor, total: int, samples: int = 2000) -> float:
    """The share of the run's ``total`` iterations where ``factor`` is 0.5 or more (at most ``samples`` points)."""
    if total <= 0:
        return 1.0
    points = range(0, total, max(1, total // samples))
    return sum(factor(it) >= 0.5 for it in points) / len(points)


def _auto_warm_up(num_warn_up, num_epochs, num_steps, max_iters):
    """``num_warn_up`` in the run's unit: ``"auto"`` is one epoch (``num_steps`` steps under ``max_iters``), or
    :data:`AUTO_WARM_UP_SHARE` of the run when that is shorter."""
    if not (isinstance(num_warn_up, str) and num_warn_up.strip().lower() == "auto"):
        return num_warn_up
    if max_iters is not None:
        return min(num_steps or 1, AUTO_WARM_UP_SHARE * max_iters)
    return min(1, AUTO_WARM_UP_SHARE * num_epochs)


def _auto_milestones(milestones, run_length):
    """``milestones`` in the run's unit: ``"auto"`` (or ``["auto"]``, as ``--milestones auto`` gives it) is
    :data:`AUTO_MILESTONES` of ``run_length``."""
    word = milestones[0] if isinstance(milestones, (list, tuple)) and len(milestones) == 1 else milestones
    if isinstance(word, str) and word.strip().lower() == "auto":
        return [round(share * run_length, 2) for share in AUTO_MILESTONES]
    return milestones


def _earlier_decay(name, num_cycles, decay, gamma, num_epochs, epochs_per_decay):
    """Checks the earlier library's ``num_cycles`` and ``decay``; returns ``gamma``, which for exp
    ``decay`` gives (so that the run falls by ``decay ** 50``)."""
    if not isinstance(num_cycles, numbers.Integral) or isinstance(num_cycles, bool) or num_cycles < 1:
        raise ConfigError(f"num_cycles must be a positive integer, got {num_cycles!r}")
    if decay is not None and not decay > 0:
        raise ConfigError(f"decay must be > 0, got {decay}")
    ignored = [key for key, used in (("num_cycles", num_cycles == 1 or name == "cosine"),
                                     ("decay", decay is None or name in ("cosine", "exp"))) if not used]
    if ignored:
        logger.warning("get_scheduler: %s ignored by scheduler %s (num_cycles shapes cosine, decay cosine and exp)",
                       " and ".join(ignored) + (" is" if len(ignored) == 1 else " are"), name)
    if name != "exp" or decay is None:
        return gamma
    if gamma is not None:
        raise ConfigError("scheduler exp takes gamma (the fall per epoch) or decay (the earlier library's: "
                          "decay ** 50 over the run), not both")
    return decay ** (50 * epochs_per_decay / num_epochs)


def _base_lrs(optimizer: torch.optim.Optimizer, lr_init: Optional[float]) -> list:
    # initial_lr first: an optimizer restored mid-run holds a scheduled value in "lr".
    own = [group.get("initial_lr", group["lr"]) for group in optimizer.param_groups]
    # Groups with different lrs were set up so on purpose (e.g. a slower backbone), and an initial_lr already
    # set is the base (the trainer's lr_scaling puts the scaled rate there): keep them.
    if lr_init is None or len(set(own)) > 1 or any("initial_lr" in group for group in optimizer.param_groups):
        return own
    return [lr_init] * len(own)


def _floor(min_lr: float, lr_init: Optional[float], optimizer: torch.optim.Optimizer) -> float:
    if min_lr < 0:
        raise ConfigError(f"min_lr must be >= 0, got {min_lr}")
    reference = lr_init or _base_lrs(optimizer, None)[0]
    return min_lr / reference
