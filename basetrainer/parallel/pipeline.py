"""Pipeline parallelism: the model's layers split into stages over the mesh's ``pp`` dimension, run by a schedule of
``torch.distributed.pipelining``.

**Units and stages.** A model is read as a sequence of *units*: its top-level modules in the order
they were assigned, with one container of blocks (``ModuleList``, ``Sequential`` or ``ModuleDict``)
expanded into its entries (``tokens, positions, blocks.0 … blocks.5, norm, head``). ``split`` names the
units where stages 1, 2, … begin (torchtitan's split points); without it the container holding
most parameters is divided evenly, the units before it going to the first stage and those after it
to the last. A model whose root is a ``Sequential`` is its own container.

**What each process holds.** Process ``p`` of the pipeline dimension holds stage ``p`` (one stage per
process: GPipe, 1F1B), or stages ``p, p + pp, …`` (``stages_per_rank`` of them: Interleaved1F1B,
LoopedBFS, InterleavedZeroBubble). The other stages' units leave its model: an entry of a
``ModuleList``/``Sequential`` becomes a pass-through (the indices, so the parameter names, stay), an entry
of a ``ModuleDict`` is removed, a top-level module becomes None (the model's ``forward`` skips what is
None, as torchtitan's models do: ``x = self.tokens(x) if self.tokens is not None else x``). Parameter
names never change, so a pipeline's checkpoint loads into the whole model and resumes on any layout.

**A step.** Every process of a pipeline sees the same batch. The first stage feeds the inputs, the
last computes the criterion on each microbatch, scaled by the microbatch's share of the batch and by
the accumulation window (``scale_grads=False``: exact for any split and any accumulation). The last
stage's outputs and losses are then broadcast over the pipeline, so the loss, the metrics and the
callbacks see the batch as on one process. A batch whose rows the microbatch count does not divide
(an epoch's short last batch) runs with the largest count that divides them; evaluation and
``predict`` run forward-only. Both use GPipe's order (LoopedBFS's with several stages per process),
which takes any count.
"""
import contextlib
import copy
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import (
    PipelineScheduleSingle,
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
    ScheduleInterleavedZeroBubble,
    ScheduleLoopedBFS,
)

from ..errors import ConfigError
from ..utils.batch import batch_size, total_loss

SCHEDULES = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B, "Interleaved1F1B": ScheduleInterleaved1F1B,
             "LoopedBFS": ScheduleLoopedBFS, "InterleavedZeroBubble": ScheduleInterleavedZeroBubble}
CONTAINERS = (nn.ModuleList, nn.Sequential, nn.ModuleDict)


@dataclass(frozen=True)
class PipelinePlan:
    """``parallel.pipeline``: the schedule's name, the microbatches per batch (None: one per stage), the units where
    stages begin (None: an even split) and the stages per process (None: 1, or 2 for a schedule that takes several)."""

    schedule: str = "1F1B"
    microbatches: Optional[int] = None
    split: Optional[tuple] = None
    stages_per_rank: Optional[int] = None

    def __post_init__(self):
        self.local_stages  # noqa: B018 (a stages_per_rank the schedule cannot take is refused when the plan is made)

    @property
    def single(self) -> bool:
        """Whether the schedule runs one stage per process."""
        return issubclass(SCHEDULES[self.schedule], PipelineScheduleSingle)

    @property
    def local_stages(self) -> int:
        if self.single:
            if self.stages_per_rank not in (None, 1):
                raise ConfigError(f"parallel.pipeline.stages_per_rank is {self.stages_per_rank} and schedule "
                                  f"{self.schedule} runs one stage per process: use Interleaved1F1B, LoopedBFS or "
                                  f"InterleavedZeroBubble, or set stages_per_rank: 1")
            return 1
        return self.stages_per_rank or 2

    def stages(self, pp: int) -> int:
        return pp * self.local_stages

    def microbatches_for(self, pp: int) -> int:
        return self.microbatches or self.stages(pp)


def pipeline_units(model: nn.Module, split=None) -> list:
    """The model's units in order (see the module docstring)."""
    if isinstance(model, CONTAINERS):
        return [name for name, _ in model.named_children()]
    children = [(name, child) for name, child in model.named_children()]
    containers = [name for name, child in children if isinstance(child, CONTAINERS)]
    expanded = {name for name in containers if any(point.startswith(name + ".") for point in split or ())}
    if not split and containers:
        expanded = {max(containers, key=lambda name: _size(model.get_submodule(name)))}
    units = []
    for name, child in children:
        units += [f"{name}.{entry}" for entry, _ in child.named_children()] if name in expanded else [name]
    return units


def assign_stages(model: nn.Module, num_stages: int, split=None) -> list:
    """The units of each of ``num_stages`` stages, as lists of names; a ConfigError for a split that does not fit."""
    units = pipeline_units(model, split)
    if split:
        unknown = [point for point in split if point not in units]
        if unknown:
            raise ConfigError(f"parallel.pipeline.split names {unknown[0]!r}, which is not a unit of "
                              f"{type(model).__name__}; its units in order: {', '.join(units)}")
        starts = [units.index(point) for point in split]
        if len(split) != num_stages - 1 or starts != sorted(set(starts)) or starts[0] == 0:
            raise ConfigError(f"parallel.pipeline.split has {len(split)} point(s) and {num_stages} stages need "
                              f"{num_stages - 1}, each a later unit than the one before (not the first unit): "
                              f"units in order: {', '.join(units)}")
    else:
        starts = _even_starts(model, units, num_stages)
    bounds = [0, *starts, len(units)]
    return [units[begin:end] for begin, end in zip(bounds, bounds[1:])]


def _even_starts(model, units, num_stages) -> list:
    """Where stages begin when the blocks are divided evenly: extra blocks to the middle stages first."""
    blocks = [index for index, unit in enumerate(units) if "." in unit or isinstance(model, CONTAINERS)]
    if len(blocks) < num_stages:
        raise ConfigError(f"{type(model).__name__} has {len(blocks)} block(s) to divide among {num_stages} pipeline "
                          f"stages (units: {', '.join(units)}): set parallel.pipeline.split, or use fewer stages")
    per_stage, extra = divmod(len(blocks), num_stages)
    order = list(range(1, num_stages)) + [0]
    sizes = [per_stage + (order.index(stage) < extra) for stage in range(num_stages)]
    starts, position = [], 0
    for size in sizes[:-1]:
        position += size
        starts.append(blocks[position])
    return starts


def microbatch_count(rows: int, configured: int) -> int:
    """The microbatches a batch of ``rows`` is split into: ``configured``, or the largest count that divides the rows
    (every microbatch of a schedule has one shape)."""
    count = min(configured, rows)
    while rows % count:
        count -= 1
    return count


def stage_indices(pp_rank: int, pp: int, local_stages: int) -> list:
    """The stages process ``pp_rank`` of the pipeline holds: ``pp_rank``, ``pp_rank + pp``, … (looped placement)."""
    return [pp_rank + round_ * pp for round_ in range(local_stages)]


def keep_units(model: nn.Module, kept, units) -> nn.Module:
    """``model`` (in place) less the units of ``units`` not in ``kept`` (see the module docstring)."""
    for unit in units:
        if unit in kept:
            continue
        parent_name, _, name = unit.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        if isinstance(parent, nn.ModuleDict):
            del parent[name]
        elif isinstance(parent, (nn.ModuleList, nn.Sequential)):
            parent._modules[name] = PassThrough()
        else:
            parent._modules[name] = None
    return model


def stage_view(model: nn.Module, kept, units) -> nn.Module:
    """A module for one stage that shares ``model``'s units: shallow copies of the root and its containers (each with
    its own module, parameter, buffer and hook tables), less the units not in ``kept``."""
    view = _shallow(model)
    for name in {unit.rpartition(".")[0] for unit in units if "." in unit}:
        view._modules[name] = _shallow(model.get_submodule(name))
    return keep_units(view, kept, units)


class PassThrough(nn.Module):
    """Stands for a block another stage holds: returns its first input."""

    def forward(self, x, *args, **kwargs):
        return x


class Pipeline:
    """This process's stages of a pipeline and the schedules that run them (see the module docstring).

    ``stages``: ``[(stage index, module)]``; ``group``: the pipeline's process group (one process per stage group);
    ``last``: the global rank holding the last stage."""

    def __init__(self, plan: PipelinePlan, stages: list, num_stages: int, group, last: int, device):
        self.plan, self.stages, self.num_stages = plan, stages, num_stages
        self.group, self.last, self.device = group, last, device
        self.is_first = any(index == 0 for index, _ in stages)
        self.is_last = any(index == num_stages - 1 for index, _ in stages)
        self.criterion, self.autocast = None, None
        self._schedules = {}
        self._losses, self._rows, self._scale = [], 1, 1
        self._schedule(True, plan.microbatches_for(dist.get_world_size(group)))  # a count torch refuses: now

    def attach_loss(self, criterion, autocast) -> None:
        """What the last stage computes the loss with (``criterion(outputs, targets)``), under ``autocast()`` (fp16
        with its gradient scaler is refused under a pipeline: each stage's scaler would skip steps on its own)."""
        self.criterion, self.autocast = criterion, autocast

    def train_step(self, inputs, scale: int):
        """Forward and backward of one ``(data, targets)`` batch through the schedule, the loss divided by ``scale``
        (the accumulation window); returns ``(outputs, losses)`` of the whole batch on every process."""
        if not isinstance(inputs, (tuple, list)) or len(inputs) != 2:
            raise ConfigError("under a pipeline a batch is (inputs, targets): the first stage takes the inputs and "
                              "the last computes the criterion on the targets; change the loader's batches")
        data, targets = inputs
        rows = batch_size(data)
        count = self._count(rows)
        self._losses, self._rows, self._scale = [], rows, scale
        schedule = self._schedule(True, count, data)
        with self.autocast(), _stages_skipped_in_forward():
            outputs = schedule.step(*self._feed(data), target=targets if self.is_last else None)
        losses = self._batch_losses(count) if self.is_last else None
        return self._broadcast((outputs, losses))

    def forward(self, *args, **kwargs):
        """The model's outputs for a batch, forward only, on every process of the pipeline."""
        rows = batch_size(args[0] if args else next(iter(kwargs.values())))
        schedule = self._schedule(False, self._count(rows), args[0] if args else None)
        with _stages_skipped_in_forward():
            outputs = schedule.eval(*args, **kwargs) if self.is_first else schedule.eval()
        return self._broadcast(outputs)

    # ------------------------------------------------------------------ schedules
    def _count(self, rows: int) -> int:
        return microbatch_count(rows, self.plan.microbatches_for(dist.get_world_size(self.group)))

    def _schedule(self, training: bool, count: int, example=None):
        """The schedule for ``count`` microbatches of a batch shaped like ``example`` (stages infer the shapes of
        what they pass on at their first step, so each shape has its own)."""
        shape = tuple(example.shape) if isinstance(example, torch.Tensor) else None
        key = (training, count, shape)
        if key not in self._schedules:
            configured = training and count == self.plan.microbatches_for(dist.get_world_size(self.group))
            if configured:
                kind = SCHEDULES[self.plan.schedule]
            else:
                kind = ScheduleGPipe if self.plan.single else ScheduleLoopedBFS
            stages = [PipelineStage(module, index, self.num_stages, self.device, group=self.group)
                      for index, module in self.stages]
            options = dict(n_microbatches=count, loss_fn=self._loss if training else None, scale_grads=False)
            try:
                self._schedules[key] = kind(stages[0], **options) if self.plan.single else kind(stages, **options)
            except ValueError as error:
                raise ConfigError(f"parallel.pipeline: schedule {self.plan.schedule} with {count} microbatches on "
                                  f"{self.num_stages} stages: {error}; change microbatches or the schedule") from None
        return self._schedules[key]

    def _feed(self, data):
        return (data,) if self.is_first else ()

    def _loss(self, outputs, targets):
        """One microbatch's loss: the criterion, weighted by the microbatch's share of the batch and divided by the
        accumulation window (its terms recorded for the batch's losses)."""
        losses = self.criterion(outputs, targets)
        share = batch_size(targets) / self._rows
        self._losses.append((share, _detached(losses)))
        return total_loss(losses) * (share / self._scale)

    def _batch_losses(self, count: int):
        """The batch's losses, as ``criterion`` gives them for one microbatch: the share-weighted sum of the last
        ``count`` (a new schedule's stages first call the loss on empty outputs, to learn the gradients' shapes)."""
        return _weighted_sum(self._losses[-count:])

    def _broadcast(self, value):
        """``value`` from the last stage's process, on every process of the pipeline."""
        return broadcast_tensors(value, self.last, self.group, self.device)


@contextlib.contextmanager
def _stages_skipped_in_forward():
    """A model whose ``forward`` calls a module of another stage (None here) fails with a ConfigError saying why."""
    try:
        yield
    except TypeError as error:
        if "'NoneType' object is not callable" not in str(error):
            raise
        raise ConfigError("the model's forward calls a module that another pipeline stage holds (None in this "
                          "process): skip such modules in forward, e.g. x = self.embed(x) if self.embed is not None "
                          "else x (see the parallelism guide), or set parallel.mesh.pp: 1") from error


def broadcast_tensors(value, src: int, group, device):
    """``value`` (tensors, or tuples, lists and dicts of them, or None) as global rank ``src`` holds it, on every
    process of ``group``: its layout first, then each tensor."""
    mine = dist.get_rank() == src
    layout = [_layout(value) if mine else None]
    dist.broadcast_object_list(layout, src=src, group=group)
    return _fill(layout[0], value if mine else None, src, group, device)


def _layout(value):
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype)
    if isinstance(value, dict):
        return ("dict", {key: _layout(item) for key, item in value.items()})
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, [_layout(item) for item in value])
    return ("value", value)


def _fill(layout, value, src, group, device):
    kind = layout[0]
    if kind == "tensor":
        tensor = value.detach().contiguous() if value is not None else torch.empty(layout[1], dtype=layout[2],
                                                                                  device=device)
        dist.broadcast(tensor, src=src, group=group)
        return tensor
    if kind == "dict":
        return {key: _fill(item, None if value is None else value[key], src, group, device)
                for key, item in layout[1].items()}
    if kind in ("tuple", "list"):
        items = [_fill(item, None if value is None else value[index], src, group, device)
                 for index, item in enumerate(layout[1])]
        return tuple(items) if kind == "tuple" else items
    return layout[1]


def _detached(losses):
    if isinstance(losses, torch.Tensor):
        return losses.detach()
    if isinstance(losses, dict):
        return {key: value.detach() for key, value in losses.items()}
    return type(losses)(value.detach() for value in losses)


def _weighted_sum(parts):
    first = parts[0][1]
    if isinstance(first, torch.Tensor):
        return sum(share * losses for share, losses in parts)
    if isinstance(first, dict):
        return {key: sum(share * losses[key] for share, losses in parts) for key in first}
    return type(first)(sum(share * losses[index] for share, losses in parts) for index in range(len(first)))


def _shallow(module: nn.Module) -> nn.Module:
    view = copy.copy(module)
    for key, value in vars(module).items():
        if isinstance(value, (dict, set)):
            setattr(view, key, copy.copy(value))
    return view


def _size(module: nn.Module) -> int:
    return sum(parameter.numel() for parameter in module.parameters())
