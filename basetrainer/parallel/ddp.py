"""One process per device, whole model in each: ``DistributedDataParallel``."""
import inspect

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..utils.log import get_logger
from .base import Strategy

logger = get_logger()


class DDPStrategy(Strategy):
    """Every rank holds the whole model; gradients are all-reduced in backward.

    ``sync_bn`` turns BatchNorm into SyncBatchNorm (CUDA only: NCCL); ``broadcast_buffers``
    copies rank 0's buffers (BatchNorm statistics) to the others before each forward.
    """

    name = "ddp"

    def __init__(self, device: torch.device, channels_last: bool = False, sync_bn: bool = False,
                 find_unused_parameters: bool = False, broadcast_buffers: bool = True, activation_checkpointing=(),
                 compile: bool = False):
        super().__init__(device, channels_last, activation_checkpointing, compile)
        self.sync_bn = sync_bn
        self.find_unused_parameters = find_unused_parameters
        self.broadcast_buffers = broadcast_buffers

    def convert(self, model: nn.Module) -> nn.Module:
        if not self.sync_bn:
            return model
        if self.device.type != "cuda":
            logger.warning("sync_bn needs CUDA (NCCL); on CPU each process keeps its own BatchNorm statistics")
            return model
        return nn.SyncBatchNorm.convert_sync_batchnorm(model)

    def distribute(self, model: nn.Module) -> nn.Module:
        kwargs = dict(find_unused_parameters=self.find_unused_parameters, **_buffer_sync_option(self.broadcast_buffers))
        if self.device.type == "cuda":
            kwargs.update(device_ids=[self.device.index], output_device=self.device.index)
        return DistributedDataParallel(model, **kwargs)

    def no_gradient_sync(self, model: nn.Module):
        # DDP decides at forward time whether the next backward all-reduces: the forward must be inside.
        return model.no_sync()


def _buffer_sync_option(broadcast_buffers: bool) -> dict:
    """DDP's option for syncing buffers before each forward, under its current name."""
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters:
        return {"forward_sync_buffers": broadcast_buffers}
    return {"broadcast_buffers": broadcast_buffers}
