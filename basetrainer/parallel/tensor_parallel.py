"""Tensor parallelism: each chosen layer's matrices split over the ``tp`` dimension of the mesh
(``torch.distributed.tensor.parallel.parallelize_module``).

A plan maps module names to styles. Names are patterns matched against the model's
module names (``fnmatch``: ``blocks.*.attention.query`` matches that Linear in every
block). It comes from, first found:

1. the config, ``parallel.tensor_parallel.plan``;
2. the trainer's ``build_parallel_plan(model, tp_size)`` hook;
3. the model's own ``tensor_parallel_plan(tp_size)`` method (a model class carries its plan, as
   the language-model example's does).

A style is one of:

- ``colwise``: the weight's output features split (each process computes some of the outputs;
  its output stays local, as the next ``rowwise`` layer expects it);
- ``rowwise``: the input features split, the partial outputs summed (all-reduce): the output is
  whole again;
- ``colwise_gather``: ``colwise``, then the outputs gathered (a last layer whose output leaves the
  tensor-parallel part whole);

or a ``ParallelStyle`` object (from a hook or a model's method) for anything else: sequence
parallelism (``SequenceParallel`` on the norms) changes the layout of the residual stream
between layers, so it needs ``input_layouts``/``output_layouts`` on its neighbours too, and
only a plan written as objects can say that. The classic
pair is a ``colwise`` layer followed by a ``rowwise`` one: one all-reduce per pair in forward.
A model whose code reshapes by a fixed head count must read its local count off the tensor
(``view(batch, length, -1, head_dim)``).
"""
import fnmatch

from torch import nn
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    RowwiseParallel,
    parallelize_module,
)

from ..errors import ConfigError
from .plans import STYLES


def style_of(name: str) -> ParallelStyle:
    """The ``ParallelStyle`` a plan's style name stands for."""
    if name == "colwise":
        return ColwiseParallel()
    if name == "rowwise":
        return RowwiseParallel()
    if name == "colwise_gather":
        return ColwiseParallel(output_layouts=Replicate())
    raise ConfigError(f"tensor parallel style {name!r} is none of {', '.join(STYLES)}: use one of them, or give a "
                      f"ParallelStyle from build_parallel_plan")


def resolve_plan(model: nn.Module, patterns: dict, tp_size: int) -> dict:
    """``{module name: ParallelStyle}`` for every module a pattern of ``patterns`` matches. Refused in one line: a
    pattern that matches no module, a module two patterns match, a split Linear or Embedding whose size ``tp_size``
    does not divide."""
    names = [name for name, _ in model.named_modules() if name]
    plan, matched_by = {}, {}
    for pattern, style in patterns.items():
        hits = [name for name in names if fnmatch.fnmatchcase(name, pattern)]
        if not hits:
            nearby = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
            raise ConfigError(f"tensor parallel plan: {pattern!r} matches no module of {type(model).__name__} "
                              f"(its modules: {nearby}): fix the name, or use * for any part")
        for name in hits:
            if name in matched_by:
                raise ConfigError(f"tensor parallel plan: module {name} is matched by {matched_by[name]!r} and "
                                  f"{pattern!r}: give each module one style")
            matched_by[name] = pattern
            plan[name] = style if isinstance(style, ParallelStyle) else style_of(style)
            _check_divisible(name, model.get_submodule(name), plan[name], tp_size)
    return plan


def _check_divisible(name: str, module: nn.Module, style: ParallelStyle, tp_size: int) -> None:
    """A split that ``tp_size`` does not divide: refused here, before any process waits on a collective."""
    if isinstance(style, ColwiseParallel) and isinstance(module, nn.Linear):
        size, what = module.out_features, "output features"
    elif isinstance(style, RowwiseParallel) and isinstance(module, nn.Linear):
        size, what = module.in_features, "input features"
    elif isinstance(style, (ColwiseParallel, RowwiseParallel)) and isinstance(module, nn.Embedding):
        size, what = (module.embedding_dim, "embedding dimensions") if isinstance(style, ColwiseParallel) \
            else (module.num_embeddings, "embeddings")
    elif isinstance(style, (ColwiseParallel, RowwiseParallel)):
        raise ConfigError(f"tensor parallel plan: {name} is a {type(module).__name__}, and colwise and rowwise "
                          f"split Linear and Embedding layers only: plan its Linear layers instead")
    else:
        return
    if size % tp_size:
        raise ConfigError(f"tensor parallel plan: {name} has {size} {what}, which tp {tp_size} does not divide: "
                          f"choose a tp that divides it")


def apply_tensor_parallel(model: nn.Module, tp_mesh, plan: dict) -> nn.Module:
    """Splits ``model``'s planned modules over ``tp_mesh`` (``plan`` as :func:`resolve_plan` returns it), in place."""
    if plan:
        parallelize_module(model, tp_mesh, plan)
    return model
