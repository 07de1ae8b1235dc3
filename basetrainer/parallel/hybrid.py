"""Hybrid parallelism on a device mesh: tensor parallel inside a group of processes, FSDP or HSDP across groups.

Chosen when the config has ``parallel.mesh`` (:mod:`.mesh`). The model is made ready in one
order, the one every kind follows (:meth:`~basetrainer.parallel.base.Strategy.wrap`):

1. tensor parallel over ``tp``: the plan's layers split (:mod:`.tensor_parallel`);
2. activation checkpointing, then ``compile`` (each block in place);
3. FSDP over the data-parallel dimensions: with ``dp_shard`` > 1 parameters are sharded there;
   with ``dp_replicate`` > 1 too, whole sharded copies are kept on each group and their
   gradients all-reduced (HSDP); with both 1 nothing is sharded and only tensor parallelism
   applies.

Everything else is :class:`~basetrainer.parallel.fsdp.FSDPStrategy`'s: accumulation without
gradient sync, BatchNorm statistics, evaluation padding, and sharded checkpoints through
``torch.distributed.checkpoint``, which reshard on load (a 2 x 2 checkpoint resumes on 1, 2 or 4
processes, and any layout's weights export whole). Gradient clipping is computed here per mesh:
tensor-parallel parameters, FSDP shards and replicated parameters live on different meshes,
and ``clip_grad_norm_`` refuses to mix them.
"""
import contextlib
from collections import defaultdict

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from ..distributed import comm
from ..errors import ConfigError
from ..utils.log import get_logger
from .fsdp import FSDPStrategy
from .mesh import Mesh
from .tensor_parallel import apply_tensor_parallel, resolve_plan

logger = get_logger()


class MeshStrategy(FSDPStrategy):
    """Tensor parallel over ``mesh.tp``, then FSDP/HSDP over ``mesh.data_parallel`` (see the module docstring).

    ``plan``: a callable ``plan(model) -> {module-name pattern: style}`` (the config's plan, the trainer's
    hook or the model's own), asked once the model exists; other arguments as for FSDPStrategy.
    """

    name = "mesh"

    def __init__(self, device: torch.device, mesh: Mesh, plan=None, **fsdp):
        super().__init__(device, **fsdp)
        self.mesh = mesh
        self.plan = plan

    def split(self, model: nn.Module) -> nn.Module:
        shape = self.mesh.shape
        if shape.tp == 1:
            return model
        patterns = self.plan(model) if self.plan else None
        if not patterns:
            raise ConfigError(f"parallel.mesh has tp {shape.tp} and no tensor parallel plan was found for "
                              f"{type(model).__name__}: set parallel.tensor_parallel.plan, override "
                              f"build_parallel_plan, or give the model a tensor_parallel_plan(tp_size) method")
        plan = resolve_plan(model, patterns, shape.tp)
        model = apply_tensor_parallel(model.to(self.device), self.mesh.tp, plan)
        if comm.is_main_process():
            logger.info("tensor parallel: %d module(s) split over tp %d", len(plan), shape.tp)
        return model

    def shard_mesh(self):
        return self.mesh.data_parallel

    def distribute(self, model: nn.Module) -> nn.Module:
        if self.mesh.shape.data_parallel_size > 1:
            model = super().distribute(model)
        if comm.is_main_process():
            logger.info("mesh: %s (%d processes)", self.mesh.shape.describe(), self.mesh.shape.size)
        return model

    def no_gradient_sync(self, model: nn.Module):
        if isinstance(model, FSDPModule):
            return super().no_gradient_sync(model)
        return contextlib.nullcontext()  # tensor parallel alone: no gradient is reduced after backward

    def clip_grad_norm(self, model: nn.Module, max_norm: float) -> torch.Tensor:
        return clip_grad_norm_by_mesh(model.parameters(), max_norm)

    def check_optimizer(self, model: nn.Module, optimizer) -> None:
        own = {id(p) for p in model.parameters()}
        if any(id(p) not in own for group in optimizer.param_groups for p in group["params"]):
            raise ConfigError("the optimizer holds parameters that are not the parallelized model's, so it would "
                              "train nothing: build it in build_optimizer from self.model.parameters(), after "
                              "build_model_parallel")


def clip_grad_norm_by_mesh(parameters, max_norm: float) -> torch.Tensor:
    """``clip_grad_norm_`` for gradients on several meshes (tensor-parallel, FSDP-sharded, plain): the norm of each
    mesh's gradients, whole (``full_tensor``), combined into the total; every gradient scaled by one factor.
    Returns the total norm before clipping, a plain tensor equal on every process."""
    groups = defaultdict(list)
    for parameter in parameters:
        if parameter.grad is not None:
            grad = parameter.grad
            groups[grad.device_mesh if isinstance(grad, DTensor) else None].append(parameter)
    if not groups:
        return torch.tensor(0.0)
    norms = []
    for group in groups.values():
        norm = nn.utils.get_total_norm([parameter.grad for parameter in group])
        norms.append(norm.full_tensor() if isinstance(norm, DTensor) else norm)
    total = torch.linalg.vector_norm(torch.stack([norm.to(norms[0].device) for norm in norms]))
    for group in groups.values():
        nn.utils.clip_grads_with_norm_(group, max_norm, total)
    return total
