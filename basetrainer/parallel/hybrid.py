"""Hybrid parallelism on a device mesh: pipeline stages, tensor parallel inside a group of processes, FSDP or HSDP
across groups.

Chosen when the config has ``parallel.mesh`` (:mod:`.mesh`). The model is made ready in one
order, the one every kind follows (:meth:`~basetrainer.parallel.base.Strategy.wrap`):

1. the pipeline split over ``pp``: this process keeps its stages' layers (:mod:`.stages`, run by :mod:`.pipeline`);
2. tensor parallel over ``tp``: the plan's layers split (:mod:`.tensor_parallel`);
3. activation checkpointing, then ``compile`` (each block in place);
4. FSDP over the data-parallel dimensions: with ``dp_shard`` > 1 parameters are sharded there;
   with ``dp_replicate`` > 1 too, whole sharded copies are kept on each group and their
   gradients all-reduced (HSDP); with both 1 nothing is sharded. Under a pipeline each stage
   is sharded as its own root, and the schedule that runs the stages is built.

Everything else is :class:`~basetrainer.parallel.fsdp.FSDPStrategy`'s: accumulation without
gradient sync, BatchNorm statistics, evaluation padding, and sharded checkpoints through
``torch.distributed.checkpoint``, which reshard on load (a 2 x 2 checkpoint resumes on 1, 2 or 4
processes, and any layout's weights export whole). Gradient clipping is computed here per mesh:
tensor-parallel parameters, FSDP shards and replicated parameters live on different meshes,
and ``clip_grad_norm_`` refuses to mix them; under a pipeline the stages' norms are combined.
"""
import contextlib
from collections import defaultdict

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from ..distributed import comm
from ..errors import ConfigError
from ..utils.log import get_logger
from .activation_checkpointing import check_class_names
from .fsdp import FSDPStrategy, candidate_units, choose_shard_classes, unit_class
from .mesh import Mesh, pipeline_rank
from .pipeline import Pipeline
from .plans import PipelinePlan
from .stages import assign_stages, keep_units, pipeline_units, stage_indices, stage_view
from .tensor_parallel import apply_tensor_parallel, resolve_plan

logger = get_logger()


class MeshStrategy(FSDPStrategy):
    """Pipeline stages over ``mesh.pp``, tensor parallel over ``mesh.tp``, then FSDP/HSDP over ``mesh.data_parallel``
    (see the module docstring).

    ``plan``: a callable ``plan(model) -> {module-name pattern: style}`` (the config's plan, the trainer's
    hook or the model's own), asked once the model exists; ``pipeline``: the
    :class:`~basetrainer.parallel.plans.PipelinePlan` when ``pp`` > 1; other arguments as for FSDPStrategy.
    """

    name = "mesh"

    def __init__(self, device: torch.device, mesh: Mesh, plan=None, pipeline: PipelinePlan = None, **fsdp):
        super().__init__(device, **fsdp)
        self.mesh = mesh
        self.plan = plan
        self.pipeline_plan = pipeline or PipelinePlan()
        self.pipeline = None  # the Pipeline, once distribute built it (pp > 1)
        self._stages = None  # [(stage index, its units)] of this process, and every unit: set by split
        self._unit_classes = ()  # the classes sharded as units in each stage, chosen on the whole model

    def split(self, model: nn.Module) -> nn.Module:
        shape = self.mesh.shape
        tp_plan = self._tensor_parallel_plan(model) if shape.tp > 1 else None  # checked on the whole model
        if shape.pp > 1:
            model = self._split_stages(model)
        if tp_plan is None:
            return model
        plan = {name: style for name, style in tp_plan.items() if _holds(model, name)}
        model = apply_tensor_parallel(model.to(self.device), self.mesh.tp, plan)
        if comm.is_main_process():
            logger.info("tensor parallel: %d module(s) split over tp %d", len(plan), shape.tp)
        return model

    def _tensor_parallel_plan(self, model: nn.Module) -> dict:
        patterns = self.plan(model) if self.plan else None
        if not patterns:
            raise ConfigError(f"parallel.mesh has tp {self.mesh.shape.tp} and no tensor parallel plan was found for "
                              f"{type(model).__name__}: set parallel.tensor_parallel.plan, override "
                              f"build_parallel_plan, or give the model a tensor_parallel_plan(tp_size) method")
        return resolve_plan(model, patterns, self.mesh.shape.tp)

    def _split_stages(self, model: nn.Module) -> nn.Module:
        """Keeps this process's stages of the model (in place), and remembers which units each holds."""
        if any(isinstance(module, nn.modules.batchnorm._BatchNorm) for module in model.modules()):
            raise ConfigError(f"{type(model).__name__} has BatchNorm layers, whose statistics cannot be kept equal "
                              f"across pipeline stages: use LayerNorm or GroupNorm, or set parallel.mesh.pp: 1")
        if model._parameters:
            raise ConfigError(f"{type(model).__name__} holds parameters itself ({', '.join(model._parameters)}), "
                              f"which no pipeline stage can own: move them into a submodule, or set "
                              f"parallel.mesh.pp: 1")
        plan, pp = self.pipeline_plan, self.mesh.shape.pp
        check_class_names(model, self.shard_classes, "fsdp_shard")
        self._unit_classes = self.shard_classes or choose_shard_classes(model)  # chosen on the whole model
        units = pipeline_units(model, plan.split)
        stages = assign_stages(model, plan.stages(pp), plan.split)
        mine = stage_indices(pipeline_rank(self.mesh.shape, comm.get_rank()), pp, plan.local_stages)
        self._stages = ([(index, set(stages[index])) for index in mine], units)
        if comm.is_main_process():
            logger.info("pipeline: %d stages (%d per process), schedule %s, %d microbatches; %s", len(stages),
                        plan.local_stages, plan.schedule, plan.microbatches_for(pp),
                        "; ".join(f"stage {index}: {_span(units)}" for index, units in enumerate(stages)))
        return keep_units(model, set().union(*(kept for _, kept in self._stages[0])), units)

    def shard_mesh(self):
        return self.mesh.data_parallel

    def distribute(self, model: nn.Module) -> nn.Module:
        if self.mesh.shape.pp > 1:
            return self._build_pipeline(model)
        if self.mesh.shape.data_parallel_size > 1:
            model = super().distribute(model)
        if comm.is_main_process():
            logger.info("mesh: %s (%d processes)", self.mesh.shape.describe(), self.mesh.shape.size)
        return model

    def _build_pipeline(self, model: nn.Module) -> nn.Module:
        """A module per stage sharing ``model``'s layers (each sharded as its own root when the data-parallel size
        is over 1), the schedule that runs them, and ``model`` made to run its forward through the pipeline."""
        stages, units = self._stages
        views = [(index, stage_view(model, kept, units)) for index, kept in stages]
        if self.mesh.shape.data_parallel_size > 1:
            for position, (_, view) in enumerate(views):  # gathered from a step's first forward to its last
                self.shard(view, reshard_after_forward=False, log=position == 0)  # backward, as torchtitan does
        shape = self.mesh.shape
        last = (shape.pp - 1) * shape.per_stage + comm.get_rank() % shape.per_stage
        self.pipeline = Pipeline(self.pipeline_plan, views, self.pipeline_plan.stages(shape.pp),
                                 self.mesh.pp.get_group(), last, self.device)
        if comm.is_main_process():
            logger.info("mesh: %s (%d processes)", shape.describe(), shape.size)
        return run_through(model, self.pipeline)

    def units(self, model: nn.Module) -> list:
        if self._stages is None:
            return super().units(model)
        return [module for _, module in reversed(candidate_units(model)) if unit_class(module) in self._unit_classes]

    def attach_loss(self, criterion, autocast) -> None:
        if self.pipeline is not None:
            self.pipeline.attach_loss(criterion, autocast)

    def forward_backward(self, model: nn.Module, forward, inputs, scale: int, scaler):
        if self.pipeline is None:
            return super().forward_backward(model, forward, inputs, scale, scaler)
        return self.pipeline.train_step(inputs, scale)

    def no_gradient_sync(self, model: nn.Module):
        if isinstance(model, FSDPModule):
            return super().no_gradient_sync(model)
        return contextlib.nullcontext()  # tensor parallel alone: no gradient is reduced after backward

    def clip_grad_norm(self, model: nn.Module, max_norm: float) -> torch.Tensor:
        across = self.pipeline.group if self.pipeline is not None else None
        return clip_grad_norm_by_mesh(model.parameters(), max_norm, across=across)

    def model_state_dict(self, model: nn.Module) -> dict:
        if self.pipeline is None:
            return super().model_state_dict(model)
        # Each process's stages, whole, on every process of their data-parallel group; rank 0 gathers the stages
        # from the processes of its pipeline.
        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
        state = self.gather_stages({key: value.detach().cpu() for key, value in state.items()})
        return state if comm.is_main_process() else {}

    def gather_stages(self, state: dict) -> dict:
        if self.pipeline is None:
            return state
        if comm.get_rank() % self.mesh.shape.per_stage:
            return state
        parts = [None] * self.mesh.shape.pp if comm.is_main_process() else None
        dist.gather_object(state, parts, dst=0, group=self.pipeline.group)
        return {key: value for part in parts for key, value in part.items()} if parts else state

    def load_model_state_dict(self, model: nn.Module, state: dict, strict: bool = True) -> None:
        if self.pipeline is None:
            return super().load_model_state_dict(model, state, strict=strict)
        own = get_model_state_dict(model).keys()  # this process's stages
        set_model_state_dict(model, {key: state[key] for key in own if key in state or strict},
                             options=StateDictOptions(full_state_dict=True, strict=strict))

    def check_optimizer(self, model: nn.Module, optimizer) -> None:
        own = {id(p) for p in model.parameters()}
        if any(id(p) not in own for group in optimizer.param_groups for p in group["params"]):
            raise ConfigError("the optimizer holds parameters that are not the parallelized model's, so it would "
                              "train nothing: build it in build_optimizer from self.model.parameters(), after "
                              "build_model_parallel")


def clip_grad_norm_by_mesh(parameters, max_norm: float, across=None) -> torch.Tensor:
    """``clip_grad_norm_`` for gradients on several meshes (tensor-parallel, FSDP-sharded, plain): the norm of each
    mesh's gradients, whole (``full_tensor``), combined into the total; every gradient scaled by one factor.
    ``across``: a process group whose members hold other parameters (a pipeline's stages), whose norms join the
    total. Returns the total norm before clipping, a plain tensor equal on every process."""
    groups = defaultdict(list)
    for parameter in parameters:
        if parameter.grad is not None:
            grad = parameter.grad
            groups[grad.device_mesh if isinstance(grad, DTensor) else None].append(parameter)
    norms = []
    for group in groups.values():
        norm = nn.utils.get_total_norm([parameter.grad for parameter in group])
        norms.append(norm.full_tensor() if isinstance(norm, DTensor) else norm)
    total = torch.linalg.vector_norm(torch.stack([norm.to(norms[0].device) for norm in norms])) if norms \
        else torch.tensor(0.0)
    if across is not None:
        squared = total.double().square()
        dist.all_reduce(squared, group=across)
        total = squared.sqrt().to(total.dtype)
    for group in groups.values():
        nn.utils.clip_grads_with_norm_(group, max_norm, total)
    return total


def run_through(model: nn.Module, pipeline: Pipeline) -> nn.Module:
    """``model`` (in place) with its forward run through ``pipeline``: evaluation, ``predict`` and a user's
    ``model(x)`` get the last stage's outputs on every process of the pipeline."""
    model.__class__ = type(f"Pipelined{type(model).__name__}", (PipelinedModule, type(model)), {})
    model._pipeline = pipeline
    return model


class PipelinedModule:
    """A model of which this process holds some stages (see :func:`run_through`)."""

    def forward(self, *args, **kwargs):
        return self._pipeline.forward(*args, **kwargs)

    @property
    def pipeline_stages(self) -> list:
        """The modules the pipeline runs, one per stage of this process, sharing this model's layers."""
        return [module for _, module in self._pipeline.stages]


def _holds(model: nn.Module, name: str) -> bool:
    try:
        return model.get_submodule(name) is not None
    except AttributeError:
        return False


def _span(units) -> str:
    return units[0] if len(units) == 1 else f"{units[0]} .. {units[-1]}"
