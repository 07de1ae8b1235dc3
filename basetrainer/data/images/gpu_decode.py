"""``decoder: nvjpeg``: the GPU decodes the batch's JPEGs (nvJPEG, through TorchCodec's ``decode_jpeg(device=
"cuda")``, in one batched call: what torchvision 0.29 recommends in place of its own image decoders) and crops,
resizes and flips them there. TorchCodec is the ``nvjpeg`` extra: ``pip install "basetrainer[nvjpeg]"``.

The loader still reads each file (or takes a shard's image) and parses its header on the CPU (bytes that are not
an image fail there, and ``on_bad_image`` applies), and draws the image's :class:`~.crops.Plan` from its size; what it yields is the files'
bytes with their plans (:class:`EncodedImages`). After the copy, ``EncodedImages.finish_on_device`` decodes them
on the device, applies each plan to the float image and normalises: the CPU's share of an image is a file read and
a header. A file the GPU is not given (another format than JPEG, CMYK, or a JPEG without its end marker, which
nvJPEG may decode as grey without a word) is decoded and augmented in the loader as ``decoder: cpu`` does; one
nvJPEG refuses on the device is decoded on the CPU there, and one that cannot be decoded at all is a DataError
naming it.
"""
import io

import numpy as np
import torch
from PIL import Image
from torch.utils.data import default_collate

from ...errors import ConfigError, DataError
from ...utils.log import get_logger
from .on_device import normalisation
from .cpu_decode import Opened, decode
from .crops import Plan, Recipe, sample_plan

logger = get_logger()

_END_OF_IMAGE = b"\xff\xd9"


class EncodedImage:
    """One image as the loader leaves it for the GPU: its file's ``data`` and ``plan``, or (decoded in the loader)
    its uint8 ``pixels`` already of the plan's size."""

    __slots__ = ("path", "data", "plan", "pixels")

    def __init__(self, path, data, plan: Plan, pixels=None):
        self.path, self.data, self.plan, self.pixels = path, data, plan, pixels


class ReadForGpu:
    """A loader's decoder under ``decoder: nvjpeg``: an image file's bytes to an :class:`EncodedImage` (``name``,
    the file's path or the shard sample's name, is for messages)."""

    def __init__(self, recipe: Recipe):
        self.recipe = recipe

    def __call__(self, data, name="") -> EncodedImage:
        opened = Opened(data)
        plan = sample_plan(self.recipe, *opened.size)
        if opened.plain_jpeg and _END_OF_IMAGE in bytes(opened.data[-64:]):
            data = data if isinstance(data, bytearray) else bytearray(data)  # writable: a tensor views it
            return EncodedImage(name, torch.frombuffer(data, dtype=torch.uint8), plan)
        return EncodedImage(name, None, plan, plan.apply(*decode(opened, plan)))


class EncodedImages:
    """A batch of :class:`EncodedImage`, decoded, augmented and normalised on the device by
    :meth:`finish_on_device` (see :mod:`.on_device`)."""

    __slots__ = ("items", "mean", "std")

    def __init__(self, items, mean, std):
        self.items, self.mean, self.std = list(items), tuple(mean), tuple(std)

    def __len__(self):
        return len(self.items)

    def pin_memory(self, device=None):
        return self  # nvJPEG reads the bytes from the host itself

    def __reduce__(self):
        # From a loader worker, the files' bytes cross as one tensor (one shared-memory block), not one per file.
        files = [item.data for item in self.items if item.data is not None]
        packed = torch.cat(files) if files else torch.empty(0, dtype=torch.uint8)
        lengths = [-1 if item.data is None else len(item.data) for item in self.items]
        rest = [(item.path, item.plan, item.pixels) for item in self.items]
        return _unpacked, (packed, lengths, rest, self.mean, self.std)

    def finish_on_device(self, device: torch.device, channels_last: bool = False) -> torch.Tensor:
        height, width = self.items[0].plan.size
        layout = torch.channels_last if channels_last else torch.contiguous_format
        images = torch.empty((len(self.items), 3, height, width), dtype=torch.float32, device=device,
                             memory_format=layout)
        encoded = [index for index, item in enumerate(self.items) if item.data is not None]
        decoded = decode_on_device([self.items[index] for index in encoded], device)
        for index, pixels in zip(encoded, decoded):
            images[index] = self.items[index].plan.apply(pixels.float())
        for index, item in enumerate(self.items):
            if item.data is None:
                images[index] = item.pixels.to(device, non_blocking=True)
        scale, shift = normalisation(self.mean, self.std, device)
        return images.mul_(scale).add_(shift)


def _unpacked(packed, lengths, rest, mean, std) -> EncodedImages:
    items, start = [], 0
    for length, (path, plan, pixels) in zip(lengths, rest):
        items.append(EncodedImage(path, None if length < 0 else packed[start:start + length], plan, pixels))
        start += max(length, 0)
    return EncodedImages(items, mean, std)


def decode_on_device(items, device: torch.device) -> list:
    """The ``items``' JPEGs decoded on ``device`` in one batched call, as uint8 ``(3, H, W)`` tensors; when nvJPEG
    refuses the batch, one by one, and an image it refuses alone is decoded on the CPU (Pillow) and moved there."""
    if not items:
        return []
    decode_jpeg = torchcodec_decode_jpeg()
    try:
        return decode_jpeg([item.data for item in items], mode="RGB", device=device)
    except RuntimeError:
        pass
    return [_decode_one(item, device) for item in items]


def torchcodec_decode_jpeg():
    """TorchCodec's ``decode_jpeg``; a ConfigError naming the pip command where TorchCodec is not installed."""
    try:
        from torchcodec.decoders import decode_jpeg
    except ImportError as error:
        raise ConfigError(f"decoder: nvjpeg decodes with TorchCodec, which cannot be imported ({error}); "
                          f'pip install "basetrainer[nvjpeg]"') from None
    return decode_jpeg


def _decode_one(item: EncodedImage, device: torch.device) -> torch.Tensor:
    try:
        return torchcodec_decode_jpeg()(item.data, mode="RGB", device=device)
    except RuntimeError as error:
        reason = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        logger.warning("decoder nvjpeg: %s decoded on the CPU (%s on %s)", item.path, reason, device)
    try:
        image = Image.open(io.BytesIO(item.data.numpy()))
        return torch.from_numpy(np.array(image.convert("RGB"))).permute(2, 0, 1).to(device)
    except Exception as error:  # noqa: BLE001 - Pillow fails on bad files in many ways
        raise DataError(f"cannot decode image {item.path} ({error}); fix or remove the file") from None


class CollateEncoded:
    """A loader's ``collate_fn`` under ``decoder: nvjpeg``: ``(EncodedImages, targets)``."""

    def __init__(self, mean, std):
        self.mean, self.std = tuple(mean), tuple(std)

    def __call__(self, samples):
        items, targets = zip(*samples)
        return EncodedImages(items, self.mean, self.std), default_collate(list(targets))
