"""One process driving several GPUs: ``nn.DataParallel``."""
import torch
from torch import nn

from ..errors import LaunchError
from .base import Strategy


class DataParallelStrategy(Strategy):
    """Replicates the model on ``device_ids`` every forward and sums the gradients on the first."""

    name = "dp"

    def __init__(self, device: torch.device, device_ids, channels_last: bool = False, activation_checkpointing=(),
                 compile: bool = False):
        super().__init__(device, channels_last, activation_checkpointing, compile)
        available = torch.cuda.device_count()
        missing = [i for i in device_ids if i >= available]
        if missing:
            raise LaunchError(f"gpu_id {list(device_ids)} asks for GPU(s) {missing} but this machine has "
                              f"{available}; list only ids below {available}")
        self.device_ids = list(device_ids)

    def compile_model(self, model: nn.Module) -> None:
        """Nothing yet: DataParallel copies the module to every GPU at each forward, and a copy would keep
        calling the original's compiled forward; the wrapper is compiled instead (:meth:`distribute`)."""

    def distribute(self, model: nn.Module) -> nn.Module:
        model = nn.DataParallel(model, device_ids=self.device_ids)
        if self.compile:
            model.compile()
        return model
