"""Parallel strategies: how a model is spread over devices, one small class per kind.

``select_strategy`` is the one place that chooses, from the process layout and the config:

- several processes: :class:`DDPStrategy`;
- one process and several GPUs in ``gpu_id``: :class:`DataParallelStrategy`;
- otherwise: :class:`Strategy` (one device, no wrapper).

To add a kind (say, sharded data parallelism), subclass :class:`Strategy` and choose it here.
"""
from torch import nn
from torch.nn.parallel import DataParallel, DistributedDataParallel

from .. import comm
from .base import Strategy, unwrap_model
from .data_parallel import DataParallelStrategy
from .ddp import DDPStrategy

__all__ = ["Strategy", "DataParallelStrategy", "DDPStrategy", "select_strategy", "strategy_of", "unwrap_model"]


def select_strategy(options, device, device_ids=None, **overrides) -> Strategy:
    """The strategy for this process: ``options`` is the trainer's :class:`LoopOptions`;
    ``device_ids`` the GPUs asked for (default ``options.gpu_id``); ``overrides`` replace
    the DDP options (``sync_bn``, ``find_unused_parameters``, ``broadcast_buffers``)."""
    ids = comm.as_id_list(options.gpu_id if device_ids is None else device_ids)
    if comm.get_world_size() > 1:
        ddp = dict(sync_bn=options.sync_bn, find_unused_parameters=options.find_unused_parameters,
                   broadcast_buffers=options.broadcast_buffers)
        ddp.update(overrides)
        return DDPStrategy(device, channels_last=options.channels_last, **ddp)
    if device.type == "cuda" and len(ids) > 1:
        return DataParallelStrategy(device, ids, channels_last=options.channels_last)
    return Strategy(device, channels_last=options.channels_last)


def strategy_of(model: nn.Module, device) -> Strategy:
    """The strategy matching a model that the user's ``build_model`` wrapped itself."""
    if isinstance(model, DistributedDataParallel):
        return DDPStrategy(device)
    if isinstance(model, DataParallel):
        return DataParallelStrategy(device, model.device_ids)
    return Strategy(device)
