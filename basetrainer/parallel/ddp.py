"""One process per device, whole model in each: ``DistributedDataParallel``, and what its replicas send (:mod:`.communication`)."""
import inspect
from typing import Optional

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..distributed import comm
from ..utils.log import get_logger
from .base import Strategy
from .communication import Communication

logger = get_logger()


class DDPStrategy(Strategy):
    """Every rank holds the whole model; gradients are all-reduced in backward.

    ``sync_bn`` turns BatchNorm into SyncBatchNorm (CUDA only: NCCL); ``broadcast_buffers``
    copies rank 0's buffers (BatchNorm statistics) to the others before each forward.
    ``communication`` says what the replicas send (:class:`~.communication.Communication`: full
    gradients by default; compressed gradients; or, under local SGD, their parameters every few
    steps, the replicas differing in between: evaluation, checkpoints and exports then use their
    average, see :meth:`averaged_weights`).
    """

    name = "ddp"

    def __init__(self, device: torch.device, channels_last: bool = False, sync_bn: bool = False,
                 find_unused_parameters: bool = False, broadcast_buffers: bool = True, activation_checkpointing=(),
                 compile: bool = False, communication: Optional[Communication] = None):
        super().__init__(device, channels_last, activation_checkpointing, compile)
        self.sync_bn = sync_bn
        self.find_unused_parameters = find_unused_parameters
        self.broadcast_buffers = broadcast_buffers
        self.communication = (communication or Communication()).build()

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
        return self._communicating(DistributedDataParallel(model, **kwargs))

    def adopt(self, model: nn.Module) -> nn.Module:
        return self._communicating(super().adopt(model))

    def _communicating(self, model: DistributedDataParallel) -> DistributedDataParallel:
        self.communication.register(model)
        if self.communication.describe() and comm.is_main_process():
            logger.info("ddp: %s", self.communication.describe())
        return model

    def no_gradient_sync(self, model: nn.Module):
        # DDP decides at forward time whether the next backward all-reduces: the forward must be inside.
        return model.no_sync()

    def attach_optimizer(self, optimizer) -> None:
        self.communication.attach_optimizer(optimizer)

    def averaged_weights(self, model: nn.Module):
        if self.replica_weights is not None:  # DiLoCo across replica groups; within one, DDP's replicas are equal
            return super().averaged_weights(model)
        return self.communication.averaged_weights()

    def checkpoint_parts(self) -> dict:
        return self.communication.checkpoint_parts()


def _buffer_sync_option(broadcast_buffers: bool) -> dict:
    """DDP's option for syncing buffers before each forward, under its current name."""
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters:
        return {"forward_sync_buffers": broadcast_buffers}
    return {"broadcast_buffers": broadcast_buffers}
