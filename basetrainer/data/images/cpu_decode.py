"""``decoder: cpu``: libjpeg-turbo decodes no more pixels than the crop needs, and the augmentation works on uint8.

Per image, in the loader (its workers, or the training process with ``num_workers: 0``):

1. the file is read and its size found (:class:`Opened`): a JPEG's from its frame header, any other file's by
   Pillow; a file that is not an image fails here or where it is decoded, and the folder's ``on_bad_image``
   applies;
2. the image's :class:`~.crops.Plan` is drawn from that size;
3. a JPEG is decoded at 1/2, 1/4 or 1/8 of its size where the plan still only downscales from there
   (libjpeg-turbo's DCT scaling through Pillow's ``draft``), else whole by ``torchvision.io.decode_jpeg``
   (libjpeg-turbo too, without Pillow's copy into its own 4-byte pixels); other formats by Pillow;
4. the plan crops, resizes (antialiased) and flips the uint8 tensor (``torchvision.transforms.v2``'s kernels).

What leaves the loader is uint8: a quarter of the bytes of a float batch to copy to the device, where the
conversion to float and the normalisation happen (:mod:`.on_device`).
"""
import io

import numpy as np
import torch
from PIL import Image
from torchvision.io import ImageReadMode, decode_jpeg, read_file

from .crops import Plan, Recipe, sample_plan
from .jpeg_header import jpeg_header


class Opened:
    """A file's bytes (``data``, a uint8 tensor) and its ``size`` (``(width, height)``), before any pixel is
    decoded. ``plain_jpeg``: a JPEG of 1 or 3 components, which ``torchvision.io.decode_jpeg`` makes RGB, its size
    read from its own header; any other file is opened by Pillow (``image``), which refuses here a file that is
    no image."""

    __slots__ = ("data", "size", "plain_jpeg", "image")

    def __init__(self, path):
        self.data = read_file(path)
        header = jpeg_header(self.data.numpy())
        self.plain_jpeg = header is not None and header.components in (1, 3)
        self.image = None
        self.size = (header.width, header.height) if self.plain_jpeg else self.pillow().size

    def pillow(self) -> Image.Image:
        """The file opened by Pillow (its header parsed, nothing decoded yet)."""
        if self.image is None:
            self.image = Image.open(io.BytesIO(self.data.numpy()))
        return self.image


class DecodeOnCpu:
    """An image folder's loader under ``decoder: cpu``: a file's path to its uint8 ``(3, H, W)`` tensor of the
    recipe's size, cropped, resized and flipped by a plan drawn for it."""

    def __init__(self, recipe: Recipe):
        self.recipe = recipe

    def __call__(self, path) -> torch.Tensor:
        opened = Opened(path)
        plan = sample_plan(self.recipe, *opened.size)
        return plan.apply(*decode(opened, plan))


def decode(opened: Opened, plan: Plan):
    """``(pixels, original)``: the ``opened`` file as uint8 ``(3, H, W)``, decoded as small as ``plan`` allows;
    ``original`` is its ``(width, height)`` when it was decoded smaller, else None."""
    size = opened.size
    reduction = plan.reduction(*size)
    if opened.plain_jpeg and reduction == 1:
        try:
            return decode_jpeg(opened.data, mode=ImageReadMode.RGB), None
        except RuntimeError:
            pass  # Pillow decodes what this stricter reader refuses, or says in its own words why it cannot
    image = opened.pillow()
    if image.format == "JPEG" and reduction > 1:
        image.draft("RGB", (size[0] // reduction, size[1] // reduction))
    pixels = torch.from_numpy(np.array(image.convert("RGB"))).permute(2, 0, 1)
    return pixels, (size if image.size != size else None)
