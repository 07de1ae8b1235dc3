"""How a model is split into pipeline stages, and what each process keeps of it (:mod:`.pipeline` runs them).

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
"""
import copy

from torch import nn

from ..errors import ConfigError

CONTAINERS = (nn.ModuleList, nn.Sequential, nn.ModuleDict)


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


def _shallow(module: nn.Module) -> nn.Module:
    view = copy.copy(module)
    for key, value in vars(module).items():
        if isinstance(value, (dict, set)):
            setattr(view, key, copy.copy(value))
    return view


def _size(module: nn.Module) -> int:
    return sum(parameter.numel() for parameter in module.parameters())
