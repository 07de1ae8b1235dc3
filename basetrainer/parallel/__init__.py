"""Parallel strategies: how a model is spread over devices, one small class per kind.

``select_strategy`` is the one place that chooses, from the process layout and the config:

- several processes and ``parallel.mesh``: :class:`MeshStrategy` (pipeline and tensor parallel, FSDP/HSDP;
  :mod:`.hybrid`);
- several processes: :class:`DDPStrategy`, or :class:`FSDPStrategy` with ``strategy: fsdp``;
- one process and several GPUs in ``gpu_id``: :class:`DataParallelStrategy`;
- otherwise: :class:`Strategy` (one device, no wrapper).

What DDP's replicas send (``local_sgd``, ``grad_compression``: :mod:`.communication`) needs
several processes under DDP; elsewhere it is refused here, before the model is made ready.

Every kind applies conversions, activation checkpointing, compile, the device and its own
wrapper in one order (:meth:`Strategy.wrap`). To add a kind, subclass :class:`Strategy` and
choose it here.

:class:`FSDPStrategy` and :class:`MeshStrategy` are imported when first used: their modules
import ``torch.distributed.fsdp``, ``.tensor`` and ``.pipelining``, which bring in
``torch._dynamo`` and cost every process about two seconds at start-up.
"""
from typing import Optional

from torch import nn
from torch.nn.parallel import DataParallel, DistributedDataParallel

from ..distributed import comm
from ..errors import ConfigError
from ..utils.lazy import lazy_attributes
from .base import Strategy, is_fsdp_module, unwrap_model
from .communication import Communication
from .data_parallel import DataParallelStrategy
from .ddp import DDPStrategy

__all__ = ["Strategy", "DataParallelStrategy", "DDPStrategy", "FSDPStrategy", "MeshStrategy", "select_strategy",
           "strategy_of", "unwrap_model"]

__getattr__ = lazy_attributes(__name__, {"basetrainer.parallel.fsdp": ("FSDPStrategy",),
                                          "basetrainer.parallel.hybrid": ("MeshStrategy",)})


def select_strategy(options, device, device_ids=None, mesh=None, plan=None, pipeline=None, **overrides) -> Strategy:
    """The strategy for this process: ``options`` is the trainer's :class:`~basetrainer.engine.options.LoopOptions`;
    ``device_ids`` the GPUs asked for (default ``options.gpu_id``); ``mesh`` the built device mesh
    (:func:`~basetrainer.parallel.mesh.build_mesh`), ``plan`` what gives its tensor-parallel plan
    and ``pipeline`` its :class:`~basetrainer.parallel.plans.PipelinePlan` (see :class:`MeshStrategy`);
    ``overrides`` replace
    the DDP options (``sync_bn``, ``find_unused_parameters``, ``broadcast_buffers``; FSDP takes
    the first and the last). One process with ``strategy: fsdp`` trains unsharded, and reads and
    writes the same sharded checkpoints."""
    ids = comm.as_id_list(options.gpu_id if device_ids is None else device_ids)
    common = dict(channels_last=options.channels_last, activation_checkpointing=options.activation_checkpointing,
                  compile=options.compile)
    if options.communication.enabled and comm.get_world_size() == 1:
        raise ConfigError(f"{_named(options.communication)} needs several processes under strategy ddp and this run "
                          f"has one: start it with --distributed (one process per gpu_id), or remove the setting")
    if mesh is not None and device.type == "cuda" and len(ids) > 1 and comm.get_world_size() == 1:
        raise ConfigError(f"parallel.mesh needs one process per GPU and this run is one process over gpu_id {ids} "
                          f"(DataParallel): start it with --distributed, or remove parallel.mesh")
    if comm.get_world_size() > 1 and (options.strategy == "fsdp" or mesh is not None):
        fsdp = dict(sync_bn=options.sync_bn, broadcast_buffers=options.broadcast_buffers)
        fsdp.update({key: value for key, value in overrides.items() if key in fsdp})
        fsdp.update(shard_classes=options.fsdp_shard, amp=options.amp, cpu_offload=options.fsdp_cpu_offload,
                    reshard_after_forward=options.fsdp_reshard_after_forward)
        if mesh is not None:
            from .hybrid import MeshStrategy
            return MeshStrategy(device, mesh, plan, pipeline, **fsdp, **common)
        from .fsdp import FSDPStrategy
        return FSDPStrategy(device, **fsdp, **common)
    if comm.get_world_size() > 1:
        ddp = dict(sync_bn=options.sync_bn, find_unused_parameters=options.find_unused_parameters,
                   broadcast_buffers=options.broadcast_buffers)
        ddp.update(overrides)
        return DDPStrategy(device, **ddp, **common, communication=options.communication)
    if device.type == "cuda" and len(ids) > 1:
        return DataParallelStrategy(device, ids, **common)
    return Strategy(device, **common)


def strategy_of(model: nn.Module, device, compile: bool = False, communication: Optional[Communication] = None):
    """The strategy matching a model that the user's ``build_model`` wrapped itself (DDP, DataParallel,
    FSDP), or None for a model no wrapper holds. ``communication`` applies to a DDP model only."""
    communication = communication or Communication()
    if isinstance(model, DistributedDataParallel):
        return DDPStrategy(device, compile=compile, communication=communication)
    if communication.enabled and (isinstance(model, DataParallel) or is_fsdp_module(model)):
        raise ConfigError(f"{_named(communication)} applies to DistributedDataParallel and build_model returned a "
                          f"{type(model).__name__}: remove the setting, or return the model unwrapped")
    if isinstance(model, DataParallel):
        return DataParallelStrategy(device, model.device_ids, compile=compile)
    if is_fsdp_module(model):
        from .fsdp import FSDPStrategy
        return FSDPStrategy(device, compile=compile)
    return None


def _named(communication: Communication) -> str:
    """The config setting that asks for ``communication``, as a user wrote it."""
    if communication.local_sgd_period:
        return f"local_sgd (period {communication.local_sgd_period})"
    return f"grad_compression: {communication.grad_compression}"
