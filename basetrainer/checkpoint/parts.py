"""The parts of a training checkpoint that are not the engine's own: the model and optimizer (through the
parallel strategy), the gradient scaler, the callbacks, the config, and every rank's random streams.

A part has ``state_dict()``, which returns the entries it adds to the checkpoint (a dict of
top-level keys; every rank calls it, so a part may use collectives), and
``load_state_dict(saved, name)``, which reads its entries back from ``saved`` (the whole
checkpoint; ``name`` says where it came from in messages). The keys are those checkpoints
have always had, so files written by earlier releases load.
"""
import copy

import torch

from ..distributed import comm
from ..errors import CheckpointError
from ..parallel.base import is_dtensor, unwrap_model
from ..utils.log import get_logger
from .rng import get_rng_state, set_rng_state
from .weights import check_shapes, strip_prefixes

logger = get_logger()


class ModelAndOptimizer:
    """The model's full weights and the optimizer's state, saved and loaded through the strategy that
    spreads the model over devices (``model``, ``optimizer``), and a pruned model's architecture.

    ``frozen_weights=False``: the checkpoint leaves out the parameters that do not train (``requires_grad``
    false: a LoRA run's base model), which the model built again holds already when a run resumes."""

    def __init__(self, strategy, model, optimizer, frozen_weights: bool = True):
        self.strategy, self.model, self.optimizer = strategy, model, optimizer
        self.frozen_weights = frozen_weights

    def weights(self) -> dict:
        """The full weights on the CPU, keys free of wrapper prefixes (empty off rank 0 under FSDP)."""
        return self.strategy.model_state_dict(self.model)

    def frozen(self) -> set:
        """The keys this checkpoint leaves out: those of the parameters that do not train, with
        ``frozen_weights=False``; none otherwise."""
        if self.frozen_weights:
            return set()
        return {strip_prefixes(name) for name, parameter in unwrap_model(self.model).named_parameters()
                if not parameter.requires_grad}

    def checkpoint_weights(self) -> dict:
        """The weights a training checkpoint holds: :meth:`weights` less :meth:`frozen`."""
        weights, frozen = self.weights(), self.frozen()
        return {key: value for key, value in weights.items() if key not in frozen} if frozen else weights

    def architecture(self) -> dict:
        """``{"architecture": spec}`` for a pruned model (its layer widths), else nothing."""
        spec = getattr(unwrap_model(self.model), "pruning_spec", None)
        return {"architecture": spec} if spec is not None else {}

    def state_dict(self) -> dict:
        return {"model": self.checkpoint_weights(), "optimizer": self.optimizer.state_dict(), **self.architecture()}

    def held_in_memory(self) -> "HeldModel":
        """Its state as it stands, held in memory (not gathered, not moved off the device's shards), for a probe that
        trains and must put it back: see :class:`HeldModel`."""
        return HeldModel(self.model, self.optimizer)

    def load_state_dict(self, saved: dict, name: str) -> None:
        for key in ("model", "optimizer"):
            if key not in saved:
                raise CheckpointError(f"{name} is not a full training checkpoint (no '{key}'); "
                                      f"use finetune to load weights only")
        weights = {strip_prefixes(key): value for key, value in saved["model"].items()}
        frozen = self.frozen()
        check_shapes(self.model, weights, name, left_out=frozen)
        self.strategy.load_model_state_dict(self.model, weights, strict=not frozen)
        self.optimizer.load_state_dict(saved["optimizer"])


class HeldModel:
    """A model's and its optimizer's state held in memory, which :meth:`restore` writes back in place, bitwise:
    weights, buffers, gradients, each module's train/eval mode, the optimizer's state and param groups. Unlike the
    checkpoint's entries (full weights, gathered on one rank) every tensor is copied where it is: to host memory,
    so that a probe of what fits has the device to itself, or, for a DTensor (an FSDP shard), on its device.
    Restoring in place keeps every object that holds a tensor or the optimizer (a schedule, a callback) valid."""

    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer
        self.tensors = _unique([*model.parameters(), *model.buffers()])
        self.values = [_HeldTensor(tensor) for tensor in self.tensors]
        self.grads = [_held(getattr(tensor, "grad", None)) for tensor in self.tensors]
        self.modes = [(module, module.training) for module in model.modules()]
        self.optimizer_state = {param: {key: _HeldTensor(value) if isinstance(value, torch.Tensor) else
                                        copy.deepcopy(value) for key, value in entry.items()}
                                for param, entry in optimizer.state.items()}
        self.groups = [{key: copy.deepcopy(value) for key, value in group.items() if key != "params"}
                       for group in optimizer.param_groups]

    def restore(self) -> None:
        """Writes the held state back (again at every call: each call copies from what is held)."""
        with torch.no_grad():
            for tensor, value, grad in zip(self.tensors, self.values, self.grads):
                tensor.copy_(value.value)
                if isinstance(tensor, torch.nn.Parameter):
                    tensor.grad = None if grad is None else grad.restored()
        for module, training in self.modes:
            module.training = training
        self.optimizer.state.clear()
        self.optimizer.state.update({param: {key: value.restored() if isinstance(value, _HeldTensor) else
                                             copy.deepcopy(value) for key, value in entry.items()}
                                     for param, entry in self.optimizer_state.items()})
        for group, held in zip(self.optimizer.param_groups, self.groups):
            for key in [key for key in group if key != "params" and key not in held]:
                del group[key]
            group.update(copy.deepcopy(held))


class _HeldTensor:
    """A copy of a tensor and the device it was on: in host memory, unless it is a DTensor (copied in place)."""

    def __init__(self, tensor):
        tensor = tensor.detach()
        self.device = tensor.device
        self.value = tensor.clone() if is_dtensor(tensor) else tensor.to("cpu", copy=True)

    def restored(self):
        """A new tensor equal to the held one, on its device (each restore makes its own)."""
        return self.value.to(self.device, copy=True)


def _held(tensor):
    return None if tensor is None else _HeldTensor(tensor)


def _unique(tensors) -> list:
    """``tensors`` without repeats (a tied weight is one parameter of two modules)."""
    seen, unique = set(), []
    for tensor in tensors:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            unique.append(tensor)
    return unique


class ScalerState:
    """The fp16 gradient scaler's scale and growth tracker (None without one)."""

    def __init__(self, scaler):
        self.scaler = scaler

    def state_dict(self) -> dict:
        return {"scaler": self.scaler.state_dict() if self.scaler is not None else None}

    def load_state_dict(self, saved: dict, name: str) -> None:
        if self.scaler is not None and saved.get("scaler"):
            self.scaler.load_state_dict(saved["scaler"])


class CallbackStates:
    """Each stateful callback's ``state_dict``, under a name that stays when other callbacks come
    and go: its ``state_key``, by default its class's qualified name, numbered from the second
    callback of a class on (``...EMA``, ``...EMA#2``). Checkpoints of earlier releases keyed them
    by list position and class name (``"3:EMA"``); those still load."""

    def __init__(self, callbacks):
        self.callbacks = list(callbacks)

    def keyed(self) -> list:
        """``(key, position key of earlier releases, callback)`` for every callback that has a state."""
        keyed, seen = [], {}
        for position, callback in enumerate(self.callbacks):
            name = getattr(callback, "state_key", None) or f"{type(callback).__module__}.{type(callback).__qualname__}"
            seen[name] = seen.get(name, 0) + 1
            key = name if seen[name] == 1 else f"{name}#{seen[name]}"
            if hasattr(callback, "state_dict"):
                keyed.append((key, f"{position}:{type(callback).__name__}", callback))
        return keyed

    def state_dict(self) -> dict:
        return {"callbacks": {key: callback.state_dict() for key, _, callback in self.keyed()}}

    def load_state_dict(self, saved: dict, name: str) -> None:
        states = saved.get("callbacks", {})
        for key, old_key, callback in self.keyed():
            if not hasattr(callback, "load_state_dict"):
                continue
            state = states.get(key, states.get(old_key))
            if state is not None:
                callback.load_state_dict(state)
            else:
                logger.warning("%s holds no state for callback %s; it starts afresh", name, key)


class ConfigRecord:
    """The run's config, as plain data. On load, the main process names the ``settings`` (config keys
    whose change alters what the remaining steps do) that differ from those the checkpoint was
    written with: the run goes on with the new ones, so it does not continue the old one exactly."""

    def __init__(self, config: dict, settings=()):
        self.config, self.settings = config, tuple(settings)

    def state_dict(self) -> dict:
        return {"config": self.config}

    def load_state_dict(self, saved: dict, name: str) -> None:
        old = saved.get("config")
        if not comm.is_main_process() or not isinstance(old, dict):
            return
        changed = [f"{key} {old[key]!r} -> {self.config[key]!r}" for key in self.settings
                   if key in old and key in self.config and old[key] != self.config[key]]
        if changed:
            logger.warning("%s was written with other settings (%s): training goes on with the new ones, "
                           "so it does not continue the old run exactly", name, ", ".join(changed))


class RandomStreams:
    """Every rank's python, numpy, torch and CUDA generators, gathered from all ranks on save. A loaded
    rank's streams wait until the loop calls :meth:`restore` (after positioning the loader, so that
    skipped batches draw nothing). Written by another number of processes, they cannot be matched to
    ranks: ``reseed()`` seeds each rank afresh and the log says the continuation is not bit-exact."""

    def __init__(self, rank: int, world_size: int, reseed=None):
        self.rank, self.world_size, self.reseed = rank, world_size, reseed
        self.pending = None

    def state_dict(self) -> dict:
        return {"rng": comm.all_gather(get_rng_state())}

    def own_state_dict(self) -> dict:
        """This rank's streams only, in its place (the others None): gathers nothing."""
        streams = [None] * self.world_size
        streams[self.rank] = get_rng_state()
        return {"rng": streams}

    def load_state_dict(self, saved: dict, name: str) -> None:
        streams = saved.get("rng") or []
        if len(streams) == self.world_size:
            self.pending = streams[self.rank]
            return
        logger.warning("%s was written by %d process(es), this run has %d: random streams are reseeded, "
                       "so the continuation is not bit-exact", name, len(streams), self.world_size)
        self.pending = None
        if self.reseed is not None:
            self.reseed()

    def restore(self) -> None:
        """Puts back the loaded streams (once)."""
        pending, self.pending = self.pending, None
        if pending is not None:
            set_rng_state(pending)

