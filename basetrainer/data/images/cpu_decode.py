"""``decoder: cpu``: libjpeg-turbo decodes no more pixels than the crop needs, and the augmentation works on uint8.

Per image, in the loader (its workers, or the training process with ``num_workers: 0``):

1. the file is read and its header parsed (Pillow): its pixel size, its format; a file that is not an image fails
   here, and the folder's ``on_bad_image`` applies;
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


class DecodeOnCpu:
    """An image folder's loader under ``decoder: cpu``: a file's path to its uint8 ``(3, H, W)`` tensor of the
    recipe's size, cropped, resized and flipped by a plan drawn for it."""

    def __init__(self, recipe: Recipe):
        self.recipe = recipe

    def __call__(self, path) -> torch.Tensor:
        data = read_file(path)
        image = Image.open(io.BytesIO(data.numpy()))  # parses the header only
        plan = sample_plan(self.recipe, *image.size)
        pixels, original = decode(image, data, plan)
        return plan.apply(pixels, original)


def decode(image: Image.Image, data: torch.Tensor, plan: Plan):
    """``(pixels, original)``: ``image`` (opened from ``data``, the file's bytes) as uint8 ``(3, H, W)``, decoded
    as small as ``plan`` allows; ``original`` is its ``(width, height)`` when it was decoded smaller, else None."""
    size = image.size
    if image.format == "JPEG":
        reduction = plan.reduction(*size)
        if reduction > 1:
            image.draft("RGB", (size[0] // reduction, size[1] // reduction))
        elif image.mode in ("RGB", "L"):
            try:
                return decode_jpeg(data, mode=ImageReadMode.RGB), None
            except RuntimeError:
                pass  # Pillow decodes what this stricter reader refuses, or says in its own words why it cannot
    pixels = torch.from_numpy(np.array(image.convert("RGB"))).permute(2, 0, 1)
    return pixels, (size if image.size != size else None)
