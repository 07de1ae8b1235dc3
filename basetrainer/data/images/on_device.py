"""Image batches that finish on the device: what crosses from the loader is uint8 (or, for GPU decoding, the files'
bytes), and the conversion to float, the normalisation and channels-last happen after the copy.

A batch element with ``finish_on_device(device, channels_last)`` is finished by the one place where the trainer
moves batches (``EngineTrainer.to_device``, through :func:`basetrainer.utils.batch.move_to_device`), for training,
evaluation and ``predict`` alike; it has ``pin_memory()`` too, which the loader's pinning thread calls. ``run_step``
receives the float batch it always did.
"""
import functools

import torch
from torch.utils.data import default_collate


class Uint8Images:
    """A batch of images as uint8 ``(N, 3, H, W)`` on the host, still to be normalised: ``(pixel / 255 - mean) /
    std`` per channel, made float on the device."""

    __slots__ = ("pixels", "mean", "std")

    def __init__(self, pixels: torch.Tensor, mean, std):
        self.pixels, self.mean, self.std = pixels, tuple(mean), tuple(std)

    def __len__(self):
        return len(self.pixels)

    def pin_memory(self, device=None):
        return Uint8Images(self.pixels.pin_memory(), self.mean, self.std)

    def finish_on_device(self, device: torch.device, channels_last: bool = False) -> torch.Tensor:
        return normalised(self.pixels.to(device, non_blocking=True), self.mean, self.std, channels_last)


def normalised(pixels: torch.Tensor, mean, std, channels_last: bool = False) -> torch.Tensor:
    """``pixels`` (uint8, or float in 0..255; ``(N, 3, H, W)``) as float32 ``(pixels / 255 - mean) / std``, in
    channels-last memory when asked (convolutions' fast layout); a new tensor, ``pixels`` is left as it is."""
    layout = torch.channels_last if channels_last else torch.contiguous_format
    scale, shift = normalisation(mean, std, pixels.device)
    images = pixels.to(dtype=torch.float32, memory_format=layout, copy=True)
    return images.mul_(scale).add_(shift)


def normalisation(mean, std, device):
    """``(scale, shift)``, ``(1, 3, 1, 1)`` float32 tensors on ``device`` with ``pixel * scale + shift == (pixel /
    255 - mean) / std``."""
    return _affine(tuple(mean), tuple(std), device)


@functools.lru_cache(maxsize=16)
def _affine(mean, std, device):
    # Made once per device: a tensor made from a list every batch would be a blocking copy to the GPU.
    std_ = torch.tensor(std, dtype=torch.float64)
    scale = (1.0 / (255.0 * std_)).float().view(1, -1, 1, 1)
    shift = (-torch.tensor(mean, dtype=torch.float64) / std_).float().view(1, -1, 1, 1)
    return scale.to(device), shift.to(device)


class CollateUint8:
    """A loader's ``collate_fn`` for uint8 images: ``(Uint8Images, targets)``, stacked by torch's default collate
    (in shared memory inside a worker) in channels-last memory: the images leave the resize in that layout, so the
    stacking is a copy of rows rather than a transposition, and the device makes the layout the model wants."""

    def __init__(self, mean, std):
        self.mean, self.std = tuple(mean), tuple(std)

    def __call__(self, samples):
        images, targets = zip(*samples)
        pixels = default_collate([image.permute(1, 2, 0) for image in images]).permute(0, 3, 1, 2)
        return Uint8Images(pixels, self.mean, self.std), default_collate(list(targets))
