"""``lr_scaling``: the optimizer's learning rate follows the global batch.

Going from 1 to N processes multiplies the global batch (per-process batch x data-parallel processes x
accumulated batches) by N; the linear rule (Goyal et al. 2017, with warm-up) multiplies the lr by the same
factor, the square-root rule (usual for Adam-type optimizers) by its square root. ``lr_scaling: {rule: linear,
base_batch_size: 64}`` sets every param group's lr to ``lr x rule(global / 64)`` once the optimizer is built,
before the callbacks are: warm-up and schedules start from the scaled rate (it is also the groups'
``initial_lr``, the base torch's and basetrainer's schedules read).

A checkpoint holds the optimizer's scaled rates; a resumed run recomputes the rate from the config's lr and its
own layout instead (another number of processes; an elastic resume changes the accumulation, or the batch, to
keep the global batch, and then the rate too stays as it was), and says so.
"""
import math
from dataclasses import dataclass
from typing import Optional

from ..distributed import comm
from ..errors import ConfigError
from ..utils.log import get_logger

logger = get_logger()

RULES = {"linear": lambda ratio: ratio, "sqrt": math.sqrt}  # of global batch / base_batch_size


@dataclass(frozen=True)
class LRScalingRule:
    """The ``lr_scaling`` config key: ``rule`` (none, linear or sqrt) and the global batch the lr was chosen for."""

    rule: str = "none"
    base_batch_size: Optional[int] = None

    @classmethod
    def from_setting(cls, values: dict) -> "LRScalingRule":
        """The rule of the checked ``lr_scaling`` key."""
        return cls(values["rule"], values["base_batch_size"])

    @property
    def enabled(self) -> bool:
        return self.rule != "none"

    def factor(self, global_batch: int) -> float:
        return RULES[self.rule](global_batch / self.base_batch_size) if self.enabled else 1.0


class LRScaling:
    """Scales ``optimizer``'s lrs for the global batch of ``loader`` (its per-process batch), the data-parallel
    processes and ``state``'s accumulation (:meth:`apply`, once it is built), and, as a checkpoint part, does it
    again for a resumed run's layout (:meth:`load_state_dict`, after the data layout's part). Made by the trainer's
    ``build`` when ``rule`` is not none."""

    def __init__(self, rule: LRScalingRule, optimizer, loader, state):
        self.rule, self.optimizer, self.loader, self.state = rule, optimizer, loader, state
        # the lrs build_optimizer gave (an initial_lr already there is the base a schedule would start from)
        self.unscaled = [group.get("initial_lr", group["lr"]) for group in optimizer.param_groups]
        self.global_batch = self.factor = None

    def apply(self) -> None:
        """Sets every group's lr and ``initial_lr`` to the scaled rate, and logs the arithmetic."""
        self._compute()
        for group, lr in zip(self.optimizer.param_groups, self.scaled()):
            group["lr"] = group["initial_lr"] = lr
        if comm.is_main_process():
            logger.info(self.arithmetic())

    def scaled(self) -> list:
        return [lr * self.factor for lr in self.unscaled]

    def arithmetic(self) -> str:
        """``lr_scaling linear: lr 0.05 x (64 x 2 processes x 1 accumulated) / 64 = 0.1``."""
        batch, processes, accumulated = self._layout()
        ratio = f"({batch} x {processes} process{'es' if processes != 1 else ''} x {accumulated} accumulated) / " \
                f"{self.rule.base_batch_size}"
        return (f"lr_scaling {self.rule.rule}: lr {_lrs(self.unscaled)} x "
                f"{f'sqrt({ratio})' if self.rule.rule == 'sqrt' else ratio} = {_lrs(self.scaled())}")

    def _layout(self) -> tuple:
        batch = getattr(self.loader, "batch_size", None)
        if not batch:
            raise ConfigError("lr_scaling needs the training loader's batch_size, and this loader has none (it "
                              "batches with a batch_sampler, or there is no training loader): set lr_scaling.rule: "
                              "none and scale lr yourself")
        return batch, comm.get_data_parallel_world_size(), self.state.accumulate_grad_batches

    def _compute(self) -> None:
        batch, processes, accumulated = self._layout()
        self.global_batch = batch * processes * accumulated
        self.factor = self.rule.factor(self.global_batch)

    # ------------------------------------------------------------------ checkpoint part
    def state_dict(self) -> dict:
        return {"lr_scaling": {"rule": self.rule.rule, "base_batch_size": self.rule.base_batch_size,
                               "global_batch": self.global_batch, "factor": self.factor, "lr": self.scaled()}}

    def load_state_dict(self, saved: dict, name: str) -> None:
        """Replaces the checkpoint's rates with this run's: the config's lr scaled for the layout the run has now
        (loaded after the data layout, which an elastic resume changes); a schedule's position is kept (each
        group's lr over its ``initial_lr``)."""
        self._compute()
        for group, lr in zip(self.optimizer.param_groups, self.scaled()):
            position = group["lr"] / group["initial_lr"] if group.get("initial_lr") else 1.0
            group["lr"], group["initial_lr"] = lr * position, lr
        if comm.is_main_process():
            logger.info("%s, recomputed on resume: %s", self.arithmetic(), _compared(saved, self.global_batch, name))


def _compared(saved: dict, global_batch: int, name: str) -> str:
    """What the resumed run's scaling keeps or changes of the one ``name`` was written with (``saved``)."""
    before = saved.get("lr_scaling")
    if before is None:
        return f"{name} was written without lr_scaling"
    written = f"{name} was written by {saved.get('world_size', '?')} process(es) with a global batch of " \
              f"{before['global_batch']} and lr {_lrs(before['lr'])}"
    if before["global_batch"] == global_batch:
        return f"{written}; the global batch is the same (an elastic resume keeps it), so the rate is too"
    return f"{written}; this run's global batch is {global_batch}, so the rate changes"


def _lrs(values) -> str:
    return ", ".join(f"{value:.4g}" for value in values)
