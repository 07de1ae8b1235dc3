"""How DDP's replicas keep in step, and what they send: full gradients, compressed gradients, or parameters every few steps.

The config keys ``local_sgd``, ``grad_compression`` and ``powersgd`` (read in
:mod:`basetrainer.engine.options`) become one :class:`Communication`; :meth:`Communication.build`
gives the object :class:`~.ddp.DDPStrategy` applies, one of:

- :class:`GradientAllReduce` (``grad_compression: none``): DDP's own all-reduce of every gradient;
- :class:`CompressedAllReduce` (``bf16``, ``fp16``): torch's ``bf16_compress_hook`` / ``fp16_compress_hook``,
  which all-reduce the gradients in half precision;
- :class:`~.powersgd.PowerSGD` (``powersgd``): torch's ``powerSGD_hook``, low-rank gradients with error feedback;
- :class:`~.local_sgd.LocalSGD` (``local_sgd``): torch's ``post_localSGD_hook``; the replicas step
  on their own gradients and average their parameters every ``period`` optimizer steps.

Each has the same few methods, which the strategy calls: ``register(ddp_model)`` (before the
first step), ``attach_optimizer(optimizer)`` (once it is built), ``averaged_weights()`` (a
context in which the model holds the weights evaluation, checkpoints and exports use),
``checkpoint_parts()`` (the state a resume must put back) and ``describe()`` (for the log).
``docs/guides/communication.md`` says when to use which.
"""
import contextlib
from dataclasses import dataclass

import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from .local_sgd import LocalSGD
from .powersgd import PowerSGD

GRAD_COMPRESSIONS = ("none", "bf16", "fp16", "powersgd")


@dataclass(frozen=True)
class Communication:
    """What DDP sends between replicas.

    ``local_sgd_period`` > 0: local SGD, the replicas average their parameters every that many
    optimizer steps, after ``local_sgd_warmup_steps`` steps of ordinary DDP (post-local SGD
    when > 0). ``grad_compression``: ``none``, ``bf16``, ``fp16`` or ``powersgd`` (rank
    ``powersgd_rank``, from optimizer step ``powersgd_start_step``; full gradients before).
    """

    local_sgd_period: int = 0
    local_sgd_warmup_steps: int = 0
    grad_compression: str = "none"
    powersgd_rank: int = 1
    powersgd_start_step: int = 10

    @property
    def enabled(self) -> bool:
        """Whether anything differs from DDP's own all-reduce of full gradients."""
        return self.local_sgd_period > 0 or self.grad_compression != "none"

    def build(self):
        """The object that applies these settings to one DDP model."""
        if self.local_sgd_period > 0:
            return LocalSGD(self.local_sgd_period, self.local_sgd_warmup_steps)
        if self.grad_compression == "powersgd":
            return PowerSGD(self.powersgd_rank, self.powersgd_start_step)
        if self.grad_compression in ("bf16", "fp16"):
            return CompressedAllReduce(self.grad_compression)
        return GradientAllReduce()


class GradientAllReduce:
    """DDP as it is: every gradient all-reduced in full precision in backward; every replica equal."""

    def register(self, ddp_model) -> None:
        """Nothing to add to DDP's own all-reduce."""

    def attach_optimizer(self, optimizer) -> None:
        """Nothing happens around the optimizer's steps."""

    def averaged_weights(self):
        """The replicas are equal: the model's own weights are their average (yields False: nothing swapped)."""
        return contextlib.nullcontext(False)

    def checkpoint_parts(self) -> dict:
        return {}

    def describe(self) -> str:
        """What differs from plain DDP, for the log: nothing."""
        return ""


class CompressedAllReduce(GradientAllReduce):
    """``grad_compression: bf16|fp16``: each gradient bucket is cast to half precision (divided by the
    number of processes first), all-reduced, and cast back: half the bytes, the replicas still equal."""

    def __init__(self, dtype_name: str):
        self.dtype_name = dtype_name

    def register(self, ddp_model) -> None:
        hook = default_hooks.bf16_compress_hook if self.dtype_name == "bf16" else default_hooks.fp16_compress_hook
        ddp_model.register_comm_hook(None, hook)

    def describe(self) -> str:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[self.dtype_name]
        return f"gradients all-reduced in {dtype} (torch's {self.dtype_name}_compress_hook)"
