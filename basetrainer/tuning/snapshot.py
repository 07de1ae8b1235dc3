"""Everything a probe of a trainer changes, saved and put back, so that a run after the probe is the run without it.

A learning-rate range test or a batch-size trial trains: it moves the weights, the optimizer's state and lr, the
BatchNorm statistics, the random streams, the training loader's sampler and the trainer's counters.
:class:`TrainerSnapshot` holds the training checkpoint's parts (those the trainer hands its
:class:`~basetrainer.checkpoint.manager.CheckpointManager`, so that a part added for a new feature is held too)
in memory, and writes them back in place on every ``restore()``, so that objects holding a reference to one of them
(a schedule holding the optimizer, a callback holding the loader) see the restored values. Beside the parts, it
holds what no checkpoint needs because a resumed run starts in a new process: gradients, each module's train/eval
mode, the loader's sampler and the generators it draws from, and the run state's every field.
"""
import copy
import dataclasses

import torch

from ..data.samplers import find_sampler
from ..errors import ConfigError

SNAPSHOT = "the state before the probe"  # what a part's messages call where it was loaded from


class TrainerSnapshot:
    """The state of ``trainer`` (after ``build()``) that training changes; ``restore()`` puts it back, bitwise."""

    def __init__(self, trainer):
        own = trainer.strategy.checkpoint_parts()
        if own:  # their state (replicas' own weights, error feedback) moves off the model's tensors with each step
            raise ConfigError(f"the tuning tools cannot put back the state of {', '.join(sorted(own))}: "
                              f"run them without the communication option that keeps it (local_sgd, powersgd)")
        self.trainer = trainer
        manager = trainer.checkpoint_manager()
        self.manager = manager
        self.model = manager.model.held_in_memory()
        self.parts = {name: _held(part.state_dict()) for name, part in manager.parts.items()}
        self.streams = manager.random_streams.own_state_dict()
        self.loader = _LoaderPosition(trainer.train_loader)
        state = trainer.state
        self.run_state = {field.name: copy.deepcopy(getattr(state, field.name)) for field in dataclasses.fields(state)}

    def restore(self) -> None:
        """Writes the held state back (it may be called again: each call copies from what is held).

        A part whose state the probe left as it was is not loaded again: loading is a resume, which some parts
        take note of (a checkpoint callback that then tidies an interrupted run's files)."""
        self.model.restore()
        for name, part in self.manager.parts.items():
            if not _same(part.state_dict(), self.parts[name]):
                part.load_state_dict(copy.deepcopy(self.parts[name]), SNAPSHOT)
        self.manager.random_streams.load_state_dict(self.streams, SNAPSHOT)
        self.manager.random_streams.restore()
        self.loader.restore()
        state = self.trainer.state  # the run part's fields are a resume's; the probe's counters go back exactly
        for name, value in self.run_state.items():
            setattr(state, name, copy.deepcopy(value))

    def __enter__(self):
        return self

    def __exit__(self, *error):
        self.restore()
        return False


class _LoaderPosition:
    """The training loader's sampler (its epoch, a pending skip) and the generators it and the loader draw from."""

    def __init__(self, loader):
        self.sampler = find_sampler(loader)
        self.attributes = dict(vars(self.sampler)) if self.sampler is not None and hasattr(self.sampler, "__dict__") \
            else None
        candidates = [getattr(loader, "generator", None), *(self.attributes or {}).values()]
        generators = {id(g): g for g in candidates if isinstance(g, torch.Generator)}.values()  # each once
        self.generators = [(generator, generator.get_state()) for generator in generators]

    def restore(self) -> None:
        if self.attributes is not None:
            vars(self.sampler).update(self.attributes)
        for generator, state in self.generators:
            generator.set_state(state)


def _held(value):
    """A deep copy of a part's entries whose tensors are kept in host memory (a probe of what fits has the device
    to itself)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {key: _held(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_held(item) for item in value)
    return copy.deepcopy(value)


def _same(now, held) -> bool:
    """Whether a part's entries now are those held (tensors compared bitwise, wherever they are)."""
    if isinstance(now, torch.Tensor) or isinstance(held, torch.Tensor):
        return (isinstance(now, torch.Tensor) and isinstance(held, torch.Tensor) and now.shape == held.shape
                and now.dtype == held.dtype and torch.equal(now.detach().cpu(), held))
    if isinstance(now, dict) and isinstance(held, dict):
        return now.keys() == held.keys() and all(_same(now[key], held[key]) for key in now)
    if isinstance(now, (list, tuple)) and isinstance(held, (list, tuple)):
        return len(now) == len(held) and all(_same(a, b) for a, b in zip(now, held))
    try:
        return type(now) is type(held) and bool(now == held)
    except (TypeError, ValueError):  # an array, or a value with no plain equality: take it as changed
        return False
