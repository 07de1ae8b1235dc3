"""Placing a model on this process's device and wrapping it for data parallelism."""
import inspect
import logging

import torch
import torch.nn as nn
from torch.nn.parallel import DataParallel, DistributedDataParallel

from ..errors import LaunchError
from . import comm

logger = logging.getLogger("basetrainer")


def build_model_parallel(
    model: nn.Module,
    device: torch.device,
    device_ids=None,
    sync_bn: bool = False,
    find_unused_parameters: bool = False,
    broadcast_buffers: bool = True,
    channels_last: bool = False,
) -> nn.Module:
    """Moves ``model`` to ``device`` and wraps it.

    - several processes: ``DistributedDataParallel`` (``device_ids=[local GPU]`` on CUDA,
      none on CPU), after converting BatchNorm to SyncBatchNorm when ``sync_bn`` and CUDA;
    - one process and several GPUs in ``device_ids``: ``nn.DataParallel``;
    - otherwise: the bare model.
    """
    ids = comm._as_id_list(device_ids)
    distributed = comm.get_world_size() > 1
    if sync_bn and distributed:
        if device.type == "cuda":
            model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        else:
            logger.warning("sync_bn needs CUDA (NCCL); on CPU each process keeps its own BatchNorm statistics")
    model = model.to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    if distributed:
        kwargs = dict(find_unused_parameters=find_unused_parameters, **_buffer_sync_option(broadcast_buffers))
        if device.type == "cuda":
            return DistributedDataParallel(model, device_ids=[device.index], output_device=device.index, **kwargs)
        return DistributedDataParallel(model, **kwargs)
    if device.type == "cuda" and len(ids) > 1:
        available = torch.cuda.device_count()
        missing = [i for i in ids if i >= available]
        if missing:
            raise LaunchError(
                f"gpu_id {ids} asks for GPU(s) {missing} but this machine has {available}; "
                f"list only ids below {available}"
            )
        return DataParallel(model, device_ids=ids)
    return model


def _buffer_sync_option(broadcast_buffers: bool) -> dict:
    """DDP's option for syncing buffers before each forward, under its current name."""
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters:
        return {"forward_sync_buffers": broadcast_buffers}
    return {"broadcast_buffers": broadcast_buffers}


def unwrap_model(model: nn.Module) -> nn.Module:
    """The user's module inside DDP, DataParallel and torch.compile wrappers."""
    while True:
        if isinstance(model, (DistributedDataParallel, DataParallel)):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model


def is_ddp(model: nn.Module) -> bool:
    return isinstance(model, DistributedDataParallel)
