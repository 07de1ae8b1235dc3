"""``decoder: cpu``: libjpeg-turbo decodes no more pixels than the crop needs, and the augmentation works on uint8.

Per image, in the loader (its workers, or the training process with ``num_workers: 0``), from the file's bytes
(an image folder's file, or an image in a shard: the same call):

1. its size is found (:class:`Opened`): a JPEG's from its frame header, any other file's by Pillow; bytes that
   are not an image fail here or where they are decoded, and the data's ``on_bad_image`` applies;
2. the image's :class:`~.crops.Plan` is drawn from that size;
3. a JPEG is decoded by libjpeg-turbo, at 1/2, 1/4 or 1/8 of its size where the plan still only downscales from
   there (the DCT scaling of its fast, SIMD inverse DCTs), into ``(H, W, C)`` rows, the layout the uint8 resize
   reads fastest: only the crop's region where the plan crops first (RandomResizedCrop) and libjpeg-turbo 3 is
   installed (:mod:`.jpeg_region`), else whole through simplejpeg (the library bundled in its wheels); other
   formats, and JPEGs libjpeg-turbo refuses, by Pillow (which says in its own words why a file cannot be decoded);
4. the plan crops, resizes (antialiased) and flips the uint8 tensor (``torchvision.transforms.v2``'s kernels).

What leaves the loader is uint8: a quarter of the bytes of a float batch to copy to the device, where the
conversion to float and the normalisation happen (:mod:`.on_device`).
"""
import dataclasses
import io
import os

import numpy as np
import simplejpeg
import torch
from PIL import Image

from .crops import Plan, Recipe, sample_plan
from .jpeg_header import jpeg_header
from .jpeg_region import RegionDecoder, region_decoder


def read_bytes(path) -> bytearray:
    """A file's bytes, in a writable buffer (a tensor may view it without a copy)."""
    with open(path, "rb") as file:
        data = bytearray(os.fstat(file.fileno()).st_size)
        count = file.readinto(data)
    return data if count == len(data) else data[:count]


class Opened:
    """An image file's bytes (``data``) and its ``size`` (``(width, height)``), before any pixel is decoded.
    ``plain_jpeg``: a JPEG of 1 or 3 components, which libjpeg-turbo makes RGB, its size read from its own
    header; any other file is opened by Pillow (``image``), which refuses here bytes that are no image."""

    __slots__ = ("data", "size", "plain_jpeg", "image")

    def __init__(self, data):
        self.data = data
        header = jpeg_header(data)
        self.plain_jpeg = header is not None and header.components in (1, 3)
        self.image = None
        self.size = (header.width, header.height) if self.plain_jpeg else self.pillow().size

    def pillow(self) -> Image.Image:
        """The file opened by Pillow (its header parsed, nothing decoded yet)."""
        if self.image is None:
            self.image = Image.open(io.BytesIO(self.data))
        return self.image


class DecodeOnCpu:
    """A loader's decoder under ``decoder: cpu``: an image file's bytes to its uint8 ``(3, H, W)`` tensor of the
    recipe's size, cropped, resized and flipped by a plan drawn for it (``name``, the file's path or the shard
    sample's name, is for messages). ``region``: a crop's region alone where libjpeg-turbo 3 is found."""

    def __init__(self, recipe: Recipe, region: bool = True):
        self.recipe = recipe
        self.region = region and region_decoder() is not None  # the decoder itself is the process's own

    def __call__(self, data, name="") -> torch.Tensor:
        opened = Opened(data)
        plan = sample_plan(self.recipe, *opened.size)
        if self.region and opened.plain_jpeg and plan.resize is None:
            crop = decode_crop(region_decoder(), opened, plan)
            if crop is not None:
                return dataclasses.replace(plan, crop=(0, 0, *crop.shape[-2:])).apply(crop)
        return plan.apply(*decode(opened, plan))


def decode_crop(decoder: RegionDecoder, opened: Opened, plan: Plan):
    """The pixels of ``plan``'s crop alone, as uint8 ``(3, H, W)`` (a view of ``(H, W, 3)`` rows), decoded as small
    as the plan allows (the crop scaled as :meth:`.Plan.apply` scales it), the same pixels as the crop of
    :func:`decode`'s; None where libjpeg-turbo refuses the file or warns about it."""
    size = opened.size
    reduction = plan.reduction(*size)
    crop = plan.crop if reduction == 1 else plan.scaled_crop(-(-size[1] // reduction), -(-size[0] // reduction), size)
    pixels = decoder.decode(opened.data, crop, reduction)
    return None if pixels is None else torch.from_numpy(pixels).permute(2, 0, 1)


def decode(opened: Opened, plan: Plan):
    """``(pixels, original)``: the ``opened`` file as uint8 ``(3, H, W)`` (a view of ``(H, W, 3)`` rows), decoded
    as small as ``plan`` allows; ``original`` is its ``(width, height)`` when it was decoded smaller, else None."""
    size = opened.size
    reduction = plan.reduction(*size)
    if opened.plain_jpeg:
        try:
            return torch.from_numpy(decode_jpeg(opened.data, size, reduction)).permute(2, 0, 1), \
                (size if reduction > 1 else None)
        except ValueError:
            pass  # Pillow decodes what this stricter reader refuses, or says in its own words why it cannot
    image = opened.pillow()
    if image.format == "JPEG" and reduction > 1:
        image.draft("RGB", (size[0] // reduction, size[1] // reduction))
    pixels = torch.from_numpy(np.array(image.convert("RGB"))).permute(2, 0, 1)
    return pixels, (size if image.size != size else None)


def decode_jpeg(data, size, reduction=1) -> np.ndarray:
    """The JPEG ``data`` of ``size`` (``(width, height)``) as RGB uint8 ``(H, W, 3)``, decoded at ``1 /
    reduction`` (1, 2, 4 or 8) of its size by libjpeg-turbo (its slow-integer inverse DCT and smooth chroma
    upsampling, as Pillow and torchvision decode); ValueError where libjpeg-turbo refuses the data."""
    if reduction == 1:
        return simplejpeg.decode_jpeg(data, colorspace="RGB")
    width, height = size
    # The smallest output at least 1/reduction of the size, scaled by at least reduction: exactly 1/reduction
    # (libjpeg-turbo's other scales, 3/8 and the like, have no SIMD inverse DCT).
    return simplejpeg.decode_jpeg(data, colorspace="RGB", min_factor=reduction, min_height=-(-height // reduction),
                                  min_width=-(-width // reduction))
