"""Everything a probe of a trainer changes, saved and put back, so that a run after the probe is the run without it.

A learning-rate range test or a batch-size trial trains: it moves the weights, the optimizer's state and lr, the
BatchNorm statistics, the random streams, the training loader's sampler and the trainer's counters.
:class:`TrainerSnapshot` copies all of them when made and writes them back, in place, on every ``restore()``,
so that objects holding a reference to one of them (a schedule holding the optimizer, a callback holding the
loader) see the restored values. Callbacks are left alone: a probe fires no event. The copies of tensors on a
GPU are kept in host memory, so that a probe of what fits (the batch-size finder) has the device to itself;
DTensors (FSDP shards) are copied where they are.
"""
import copy
import dataclasses

import torch

from ..checkpoint.rng import get_rng_state, set_rng_state
from ..data.samplers import find_sampler
from ..errors import ConfigError
from ..parallel.base import is_dtensor


class TrainerSnapshot:
    """The state of ``trainer`` (after ``build()``) that training changes; ``restore()`` puts it back, bitwise."""

    def __init__(self, trainer):
        parts = trainer.strategy.checkpoint_parts()
        if parts:  # their state (replicas' own weights, error feedback) is no tensor of the model's to copy back
            raise ConfigError(f"the tuning tools cannot put back the state of {', '.join(sorted(parts))}: "
                              f"run them without the communication option that keeps it (local_sgd, powersgd)")
        self.trainer = trainer
        model = trainer.model
        self._tensors = _unique([*model.parameters(), *model.buffers()])
        self._values = [_saved(tensor) for tensor in self._tensors]
        self._grads = [_saved(getattr(tensor, "grad", None)) for tensor in self._tensors]
        self._modes = [(module, module.training) for module in model.modules()]
        optimizer = trainer.optimizer
        self._optimizer_state = {param: _copied(entry) for param, entry in optimizer.state.items()}
        self._groups = [{key: copy.deepcopy(value) for key, value in group.items() if key != "params"}
                        for group in optimizer.param_groups]
        self._scaler = copy.deepcopy(trainer.scaler.state_dict()) if trainer.scaler is not None else None
        self._rng = get_rng_state()  # CUDA's too, once CUDA is in use
        self._loader = _LoaderPosition(trainer.train_loader)
        state = trainer.state
        self._run_state = {field.name: copy.deepcopy(getattr(state, field.name))
                           for field in dataclasses.fields(state)}

    def restore(self) -> None:
        """Writes the saved state back (it may be called again: each call copies from the saved values)."""
        trainer = self.trainer
        with torch.no_grad():
            for tensor, value, grad in zip(self._tensors, self._values, self._grads):
                tensor.copy_(value.value)
                if isinstance(tensor, torch.nn.Parameter):
                    tensor.grad = _restored(grad)
        for module, training in self._modes:
            module.training = training
        optimizer = trainer.optimizer
        optimizer.state.clear()
        optimizer.state.update({param: _restored_entry(entry) for param, entry in self._optimizer_state.items()})
        for group, saved in zip(optimizer.param_groups, self._groups):
            for key in [key for key in group if key != "params" and key not in saved]:
                del group[key]
            group.update(copy.deepcopy(saved))
        if self._scaler is not None:
            trainer.scaler.load_state_dict(copy.deepcopy(self._scaler))
        set_rng_state(self._rng)
        self._loader.restore()
        state = trainer.state
        for name, value in self._run_state.items():
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
        self.generators = [(generator, generator.get_state())
                           for generator in _unique([g for g in candidates if isinstance(g, torch.Generator)])]

    def restore(self) -> None:
        if self.attributes is not None:
            vars(self.sampler).update(self.attributes)
        for generator, state in self.generators:
            generator.set_state(state)


def _unique(tensors) -> list:
    """``tensors`` without repeats (a tied weight is one parameter of two modules)."""
    seen, unique = set(), []
    for tensor in tensors:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            unique.append(tensor)
    return unique


class _SavedTensor:
    """A copy of a tensor and the device it was on: in host memory, unless it is a DTensor (copied in place)."""

    def __init__(self, tensor):
        tensor = tensor.detach()
        self.device = tensor.device
        self.value = tensor.clone() if is_dtensor(tensor) else tensor.to("cpu", copy=True)

    def restored(self):
        """A new tensor equal to the saved one, on its device (each restore makes its own)."""
        return self.value.to(self.device, copy=True)


def _saved(tensor):
    return None if tensor is None else _SavedTensor(tensor)


def _restored(saved):
    return None if saved is None else saved.restored()


def _copied(entry: dict) -> dict:
    """An optimizer's per-parameter state, its tensors (``step``, moments, momentum buffers) saved."""
    return {key: _SavedTensor(value) if isinstance(value, torch.Tensor) else copy.deepcopy(value)
            for key, value in entry.items()}


def _restored_entry(entry: dict) -> dict:
    return {key: value.restored() if isinstance(value, _SavedTensor) else copy.deepcopy(value)
            for key, value in entry.items()}
