"""What every parallel strategy does, and the single-device strategy that does it plainly."""
import contextlib
import sys

import torch
from torch import nn
from torch.nn.parallel import DataParallel, DistributedDataParallel

from ..utils.batch import total_loss
from .activation_checkpointing import checkpoint_activations


class Strategy:
    """How the model is spread over devices: one object per kind, chosen in
    :func:`~basetrainer.parallel.select_strategy`.

    The loop and the checkpoints go through these methods only, never through ``isinstance``
    tests on the model, so a new kind of parallelism is one more subclass.

    :meth:`wrap` applies everything to the model in one order, the same for every kind
    (torchtitan's): module conversions the kind needs (SyncBatchNorm), the model-parallel
    split (tensor parallel: :meth:`split`), activation checkpointing, ``compile`` (in place,
    so ``state_dict`` keys stay the model's), this process's device (channels-last if asked),
    then the kind's own wrapper or sharding (:meth:`distribute`). A kind overrides the steps it
    does differently.
    """

    name = "single"
    sharded_checkpoint = False  # True: checkpoints are directories of per-rank shards (basetrainer.checkpoint.sharded)
    pipeline = None  # a basetrainer.parallel.pipeline.Pipeline where the model's stages are spread over processes
    replica_weights = None  # under DiLoCo across replica groups: a context that swaps in the groups' outer weights

    def __init__(self, device: torch.device, channels_last: bool = False, activation_checkpointing=(),
                 compile: bool = False):
        self.device = device
        self.channels_last = channels_last
        self.activation_checkpointing = tuple(activation_checkpointing or ())
        self.compile = compile

    def wrap(self, model: nn.Module) -> nn.Module:
        """``model`` made ready to train: see the class docstring for the order of the steps."""
        model = checkpoint_activations(self.split(self.convert(model)), self.activation_checkpointing)
        if self.compile:
            self.compile_model(model)
        model = model.to(self.device)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        return self.distribute(model)

    def convert(self, model: nn.Module) -> nn.Module:
        """Replaces modules the kind needs replaced before anything else (nothing here)."""
        return model

    def split(self, model: nn.Module) -> nn.Module:
        """Splits the model over the devices of a model-parallel dimension (tensor parallel), before activation
        checkpointing and compile wrap its modules (nothing here)."""
        return model

    def compile_model(self, model: nn.Module) -> None:
        """``torch.compile`` in place (``nn.Module.compile``): no ``_orig_mod.`` in the weights' keys."""
        model.compile()

    def distribute(self, model: nn.Module) -> nn.Module:
        """The kind's wrapper or sharding, last (none here: one device)."""
        return model

    def adopt(self, model: nn.Module) -> nn.Module:
        """A model the user's ``build_model`` placed and wrapped itself: only ``compile`` still applies."""
        if self.compile:
            model.compile()
        return model

    def attach_loss(self, criterion, autocast) -> None:
        """Called once the criterion exists: a pipeline computes the loss on its last stage, under ``autocast()``.
        Nothing here."""

    def forward_backward(self, model: nn.Module, forward, inputs, scale: int, scaler):
        """One batch's forward and backward. ``forward(inputs)`` gives ``(outputs, losses)`` (the trainer's
        ``run_step`` under autocast); backward runs on their total divided by ``scale`` (the accumulation window),
        scaled by ``scaler`` (fp16) if any. Returns ``(outputs, losses)``. A pipeline runs its schedule instead."""
        outputs, losses = forward(inputs)
        loss = total_loss(losses)
        if scale > 1:
            loss = loss / scale
        (loss if scaler is None else scaler.scale(loss)).backward()
        return outputs, losses

    def no_gradient_sync(self, model: nn.Module):
        """A context in which forward and backward leave the gradients unreduced (inside an accumulation window)."""
        return contextlib.nullcontext()

    def clip_grad_norm(self, model: nn.Module, max_norm: float) -> torch.Tensor:
        """Scales the gradients so that their total norm is at most ``max_norm``; returns the norm before."""
        return nn.utils.clip_grad_norm_(model.parameters(), max_norm)

    def prepare_for_optimizer(self, model: nn.Module) -> None:
        """Called just before ``build_optimizer``: puts the parameters the optimizer must hold in place."""

    def check_optimizer(self, model: nn.Module, optimizer) -> None:
        """Called just after ``build_optimizer``: raises a ConfigError when ``optimizer`` cannot train ``model``."""

    def attach_optimizer(self, optimizer) -> None:
        """Called once ``optimizer`` is built and checked: whatever the kind does around its steps (DDP's local
        SGD averages the replicas after some, through a step post-hook). Nothing here."""

    def evaluation_padding(self, loader) -> int:
        """Forwards this rank adds after its last evaluation batch so that every rank runs as many
        (needed where a forward is a collective, as under FSDP); 0 here."""
        return 0

    def averaged_weights(self, model: nn.Module):
        """A context in which ``model`` holds the weights evaluation, checkpoints and exports use: those every
        replica holds alike. Here the model's own (it yields False: nothing swapped in); under DDP's local SGD,
        where the replicas differ between averagings, their average, and under DiLoCo across replica groups
        (:mod:`basetrainer.fault_tolerance.diloco`) the outer weights (it yields True)."""
        return self.replica_weights() if self.replica_weights is not None else contextlib.nullcontext(False)

    def model_state_dict(self, model: nn.Module) -> dict:
        """The full weights on the CPU, keys without wrapper prefixes (every rank calls it): those every replica
        holds alike (:meth:`averaged_weights`; copied when swapped in, since the replica's own are put back)."""
        with self.averaged_weights(model) as averaged:
            weights = {k: v.detach().cpu() for k, v in unwrap_model(model).state_dict().items()}
            return {key: value.clone() for key, value in weights.items()} if averaged else weights

    def gather_stages(self, state: dict) -> dict:
        """``state``, keyed by the model's parameter names, whole on rank 0: under a pipeline, where each process
        holds its stages' entries, rank 0 gets every stage's (the others keep their own). Every process calls it."""
        return state

    def checkpoint_parts(self) -> dict:
        """The strategy's own parts of a training checkpoint, by name (see :mod:`basetrainer.checkpoint.parts`):
        state it keeps beside the model and the optimizer that a resume must put back. None here."""
        return {}

    def load_model_state_dict(self, model: nn.Module, state: dict, strict: bool = True) -> None:
        """Loads full, prefix-free weights (as ``model_state_dict`` gives them) into ``model``; ``strict=False``:
        ``state`` may leave weights out (a checkpoint of the weights that train), which keep their values."""
        unwrap_model(model).load_state_dict(state, strict=strict)


def unwrap_model(model: nn.Module) -> nn.Module:
    """The user's module inside DDP, DataParallel and torch.compile wrappers."""
    while True:
        if isinstance(model, (DistributedDataParallel, DataParallel)):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model


def is_dtensor(tensor) -> bool:
    """Whether ``tensor`` is a DTensor (an FSDP shard, a tensor-parallel piece)."""
    return _is_instance(tensor, "torch.distributed.tensor", "DTensor")


def is_fsdp_module(model: nn.Module) -> bool:
    """Whether ``fully_shard`` wrapped ``model``."""
    return _is_instance(model, "torch.distributed.fsdp", "FSDPModule")


def _is_instance(value, module_name: str, class_name: str) -> bool:
    """``isinstance(value, module_name.class_name)`` without importing the module (a second at a process's
    start): no instance exists before it is imported."""
    module = sys.modules.get(module_name)
    return module is not None and isinstance(value, getattr(module, class_name))
