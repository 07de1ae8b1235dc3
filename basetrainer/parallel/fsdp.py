"""One process per device, each holding a shard of every parameter: FSDP2 (``torch.distributed.fsdp.fully_shard``).

Each module of the classes in ``fsdp_shard`` (by default the repeated block class that
holds most of the parameters, see :func:`choose_shard_classes`) becomes a unit whose
parameters are all-gathered just before its forward and backward and freed after; the
root is sharded last and holds what is left. Gradients are reduce-scattered, so each
rank keeps and steps the optimizer state of its own shard only.

What differs from DDP, and how it is handled here:

- ``no_sync`` does not exist: accumulation uses ``set_requires_gradient_sync(False)``;
- ``clip_grad_norm_`` returns a DTensor: the global norm is its ``full_tensor()``;
- an optimizer must hold the sharded parameters themselves
  (:meth:`~basetrainer.parallel.fsdp.FSDPStrategy.check_optimizer`), and a forward before it is
  built leaves the root unsharded (:meth:`~basetrainer.parallel.base.Strategy.prepare_for_optimizer`);
- BatchNorm statistics are per rank: after every training forward rank 0's are broadcast,
  so all ranks hold the same (or, with ``sync_bn`` on CUDA, SyncBatchNorm);
- every forward all-gathers: a rank with one evaluation batch fewer runs one more forward
  (:meth:`~basetrainer.parallel.base.Strategy.evaluation_padding`) so that no rank waits for a
  collective that never comes;
- checkpoints are sharded directories (:mod:`basetrainer.checkpoint.sharded`).
"""
import contextlib
from collections import defaultdict

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from torch.distributed.tensor import DTensor

from ..distributed import comm
from ..errors import ConfigError
from ..utils.log import get_logger
from .activation_checkpointing import check_class_names, named_blocks
from .base import Strategy

logger = get_logger()

_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


class FSDPStrategy(Strategy):
    """Shards parameters, gradients and optimizer state over all ranks with ``fully_shard``.

    ``shard_classes``: class names of the modules sharded as units (empty: chosen
    automatically); ``reshard_after_forward``: free a unit's gathered parameters after its
    forward (less memory, one more all-gather in backward); ``cpu_offload``: keep shards,
    gradients and optimizer state in host memory; ``amp``: the dtype parameters are
    gathered and computed in (gradients are reduced in float32); ``sync_bn`` and
    ``broadcast_buffers`` as for DDP.
    """

    name = "fsdp"
    sharded_checkpoint = True

    def __init__(self, device: torch.device, channels_last: bool = False, activation_checkpointing=(),
                 shard_classes=(), reshard_after_forward: bool = True, cpu_offload: bool = False, amp=None,
                 sync_bn: bool = False, broadcast_buffers: bool = True, compile: bool = False):
        super().__init__(device, channels_last, activation_checkpointing, compile)
        if sync_bn and device.type != "cuda":
            raise ConfigError("sync_bn needs CUDA (NCCL) and this run is on the CPU; under strategy fsdp set "
                              "sync_bn: false (rank 0's BatchNorm statistics are then broadcast after each step)")
        self.shard_classes = tuple(shard_classes or ())
        self.reshard_after_forward = reshard_after_forward
        self.cpu_offload = cpu_offload
        self.amp = amp
        self.sync_bn = sync_bn
        self.broadcast_buffers = broadcast_buffers

    # ------------------------------------------------------------------ wrapping
    def convert(self, model: nn.Module) -> nn.Module:
        return nn.SyncBatchNorm.convert_sync_batchnorm(model) if self.sync_bn else model

    def compile_model(self, model: nn.Module) -> None:
        """Each unit in place before it is sharded (as torchtitan compiles each block), the whole model
        when there is none: FSDP's gathers stay outside the compiled code."""
        for module in self.units(model) or [model]:
            module.compile()

    def shard_mesh(self):
        """The processes that shard the parameters: all of them, on a 1-D mesh."""
        return init_device_mesh(self.device.type, (comm.get_world_size(),))

    def distribute(self, model: nn.Module) -> nn.Module:
        return self.shard(model, self.reshard_after_forward)

    def shard(self, model: nn.Module, reshard_after_forward: bool, log: bool = True) -> nn.Module:
        """``fully_shard`` on each unit (``reshard_after_forward``: see the class), then on ``model`` as the root,
        whose parameters stay gathered after forward (backward needs them at once); ``log``: say so."""
        options = dict(mesh=self.shard_mesh(),
                       reshard_after_forward=reshard_after_forward, offload_policy=self._offload_policy())
        if self.amp is not None:
            options["mp_policy"] = MixedPrecisionPolicy(param_dtype=self.amp, reduce_dtype=torch.float32)
        units = self.units(model)
        classes = sorted({unit_class(unit) for unit in units})  # before fully_shard renames their classes
        named = bool(named_blocks(model)) and not self.shard_classes
        for module in units:
            fully_shard(module, **options)
        fully_shard(model, **{**options, "reshard_after_forward": False})  # backward needs it at once
        self._keep_batchnorm_statistics_equal(model)
        if comm.is_main_process() and log:
            how = "fsdp_shard" if self.shard_classes else "named by the model (_no_split_modules)" \
                if named else "chosen automatically: the repeated modules holding most parameters"
            mesh = options["mesh"]  # 1-D: shards; 2-D (HSDP): replicas of shards
            over = f"{mesh.size()} processes" if mesh.ndim == 1 or mesh.size(0) == 1 else \
                f"{mesh.size(1)} process(es), {mesh.size(0)} replicas (HSDP)"
            logger.info("fsdp: %d unit(s) of %s (%s) and the root, sharded over %s", len(units),
                        ", ".join(classes) or "no class", how, over)
        return model

    def units(self, model: nn.Module) -> list:
        """The modules sharded as units, innermost first: those of ``fsdp_shard``'s classes, or of the
        class :func:`choose_shard_classes` picks."""
        classes = self.shard_classes or choose_shard_classes(model)
        check_class_names(model, classes, "fsdp_shard")
        return [module for _, module in reversed(candidate_units(model)) if unit_class(module) in classes]

    def _offload_policy(self):
        if not self.cpu_offload:
            return OffloadPolicy()
        if self.device.type == "cuda" and "gloo" not in str(dist.get_backend()):
            raise ConfigError("fsdp_cpu_offload needs a process group with a CPU backend (gradient norms and "
                              "checkpoints reduce CPU tensors); start the processes with backend "
                              "'cuda:nccl,cpu:gloo', or set fsdp_cpu_offload: false")
        return CPUOffloadPolicy(pin_memory=self.device.type == "cuda")

    def _keep_batchnorm_statistics_equal(self, model):
        """Broadcasts rank 0's BatchNorm statistics after every training forward (DDP broadcasts
        them before each forward): every rank then evaluates and saves the same ones."""
        buffers = [buffer for module in model.modules() if isinstance(module, nn.modules.batchnorm._BatchNorm)
                   and not isinstance(module, nn.SyncBatchNorm) for buffer in module.buffers()]
        if not buffers:
            return
        if not self.broadcast_buffers:
            logger.warning("broadcast_buffers is off: each process keeps its own BatchNorm statistics under fsdp, "
                           "and checkpoints hold one process's")
            return

        def broadcast(module, inputs, output):
            if module.training:
                for buffer in buffers:
                    dist.broadcast(buffer, src=0)

        model.register_forward_hook(broadcast)

    # ------------------------------------------------------------------ the loop
    @contextlib.contextmanager
    def no_gradient_sync(self, model: nn.Module):
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)

    def clip_grad_norm(self, model: nn.Module, max_norm: float) -> torch.Tensor:
        norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        return norm.full_tensor() if isinstance(norm, DTensor) else norm

    def prepare_for_optimizer(self, model: nn.Module) -> None:
        # A forward in build_model (a model summary) leaves the root's parameters gathered, and
        # model.parameters() would then give the unsharded copies, which no step ever reaches.
        reshard(model)

    def check_optimizer(self, model: nn.Module, optimizer) -> None:
        sharded = {id(p) for p in model.parameters()}
        held = [p for group in optimizer.param_groups for p in group["params"]]
        if any(id(p) not in sharded or not isinstance(p, DTensor) for p in held):
            raise ConfigError("the optimizer holds parameters that are not the sharded model's, so it would train "
                              "nothing: build it in build_optimizer from self.model.parameters(), after "
                              "build_model_parallel")

    def evaluation_padding(self, loader) -> int:
        batches = len(loader)
        most, negated_least = comm.all_reduce_max(torch.tensor([batches, -batches], device=self.device)).tolist()
        if most and not -negated_least:  # a rank with no batch has no inputs to pad with: refused on every rank
            raise ConfigError(f"strategy fsdp: a process has no evaluation batch (the busiest has {most}), and "
                              "under fsdp every forward is a collective: give each set at least one sample "
                              f"per process ({comm.get_world_size()}), or evaluate it outside the sharded run")
        return most - batches

    # ------------------------------------------------------------------ weights
    def model_state_dict(self, model: nn.Module) -> dict:
        """The full weights on the CPU on rank 0 (gathered shard by shard); an empty dict on the other ranks."""
        reshard(model)
        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def load_model_state_dict(self, model: nn.Module, state: dict, strict: bool = True) -> None:
        """Loads full weights (every rank holds them) into the shards (``strict``: as the base class's)."""
        set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, strict=strict))


def reshard(model: nn.Module) -> None:
    """Frees the parameters a forward left gathered and puts the shards back in the modules (``model``'s, and those of
    the pipeline stages it runs through: :class:`~basetrainer.parallel.hybrid.PipelinedModule`)."""
    for root in [model, *getattr(model, "pipeline_stages", ())]:
        for module in root.modules():
            if isinstance(module, FSDPModule):
                module.reshard()


def unit_class(module: nn.Module) -> str:
    """The class name a module is chosen by: the wrapped module's, for an activation-checkpointing wrapper."""
    return type(getattr(module, "_checkpoint_wrapped_module", module)).__name__


def choose_shard_classes(model: nn.Module) -> tuple:
    """The class to shard by when ``fsdp_shard`` is unset: the blocks the model names itself (a transformers
    model's ``_no_split_modules``, its decoder layers: :func:`~basetrainer.parallel.activation_checkpointing.named_blocks`); else, of
    the classes with several instances that together hold at least half of the parameters, the one with the
    fewest instances (a transformer's or ResNet's blocks rather than the linear layers inside them). Containers
    (Sequential, ModuleList) never count. Empty when no class qualifies: the root is then the only unit."""
    named = named_blocks(model)
    if named:
        return named
    total = sum(p.numel() for p in model.parameters())
    count, params = defaultdict(int), defaultdict(int)
    for name, module in candidate_units(model):
        if isinstance(module, _CONTAINERS):
            continue
        key = unit_class(module)
        if _inside_same_class(model, name, key):
            continue
        count[key] += 1
        params[key] += sum(p.numel() for p in module.parameters())
    candidates = [key for key in count if count[key] > 1 and 2 * params[key] >= total > 0]
    if not candidates:
        return ()
    return (min(candidates, key=lambda key: (count[key], -params[key])),)


def candidate_units(model: nn.Module) -> list:
    """``(name, module)`` of every submodule, in pre-order; an activation-checkpointing wrapper
    stands for the module it wraps (sharding the wrapper shards it)."""
    return [(name, module) for name, module in model.named_modules()
            if module is not model and not name.endswith("_checkpoint_wrapped_module")]


def _inside_same_class(model: nn.Module, name: str, key: str) -> bool:
    """Whether module ``name`` sits inside another module of class ``key`` (only the outer one counts)."""
    parts = name.split(".")
    for end in range(1, len(parts)):
        if unit_class(model.get_submodule(".".join(parts[:end]))) == key:
            return True
    return False
