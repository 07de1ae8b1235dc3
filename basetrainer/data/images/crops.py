"""Where an image is cropped, what size it becomes and whether it is flipped, decided from its pixel size alone.

A :class:`Recipe` is the classification task's augmentation (``augmentation``, ``input_size``, ``crop_ratio``,
``crop_scale``, ``hflip``). :func:`sample_plan` draws one image's :class:`Plan` from the width and height its
file's header gives, before anything is decoded; so a decoder can decode no more pixels than the plan needs (a
JPEG at 1/2, 1/4 or 1/8 of its size, :meth:`Plan.reduction`), or ship the file to the GPU with its plan and
decode there. :meth:`Plan.apply` then crops, resizes and flips the decoded image, a uint8 tensor on the CPU or a
float one on the GPU, with ``torchvision.transforms.v2``'s kernels.

The two recipes draw what torchvision's reference transforms (:mod:`.reference_recipe`) draw, in the same order from the
same random stream (torch's, seeded per loader worker by the training loader), so that a seed gives both the same
crops and flips:

- ``resize_crop``: resize to ``input_size / crop_ratio`` (aspect ratio not kept), then crop ``input_size``, at
  random for training (``RandomCrop``) and in the centre for testing (``CenterCrop``);
- ``imagenet``: for training a random area of ``crop_scale`` of the image with an aspect ratio between 3/4 and
  4/3, resized to ``input_size`` (``RandomResizedCrop``); for testing the shorter side resized to
  ``max(input_size) / crop_ratio`` (256 for 224), then the centre ``input_size`` (``Resize``, ``CenterCrop``).

Training flips half the images left to right with ``hflip``.
"""
import dataclasses
import math
from typing import Optional, Tuple

import torch
from torchvision.transforms.v2 import functional as F

AUGMENTATIONS = ("resize_crop", "imagenet")
ASPECT_RATIOS = (3 / 4, 4 / 3)  # RandomResizedCrop's, as in torchvision's ImageNet reference
_LOG_ASPECT_RATIOS = torch.log(torch.tensor(ASPECT_RATIOS)).tolist()  # float32's, as RandomResizedCrop's
REDUCTIONS = (8, 4, 2)  # the scales libjpeg-turbo decodes a JPEG at with its fast (SIMD) inverse DCT


@dataclasses.dataclass(frozen=True)
class Recipe:
    """The augmentation of one loader: ``size`` is ``(height, width)`` out; ``train`` draws at random."""

    size: Tuple[int, int]
    train: bool
    augmentation: str = "resize_crop"
    crop_ratio: float = 0.875
    crop_scale: Tuple[float, float] = (0.08, 1.0)
    hflip: bool = False

    def __post_init__(self):
        if self.augmentation not in AUGMENTATIONS:
            raise ValueError(f"augmentation {self.augmentation!r} is not one of {', '.join(AUGMENTATIONS)}")

    @classmethod
    def from_config(cls, cfg, train: bool) -> "Recipe":
        """The recipe of a classification config (``input_size`` is ``[width, height]``)."""
        width, height = cfg["input_size"]
        return cls(size=(int(height), int(width)), train=train, augmentation=cfg.get("augmentation", "resize_crop"),
                   crop_ratio=float(cfg["crop_ratio"]), crop_scale=tuple(cfg.get("crop_scale", (0.08, 1.0))),
                   hflip=bool(cfg.get("hflip")))

    def resized_side(self) -> int:
        """``imagenet`` testing: the shorter side's length before the centre crop."""
        return round(max(self.size) / self.crop_ratio)


@dataclasses.dataclass(frozen=True)
class Plan:
    """One image's geometry. With ``resize`` (``(height, width)``) the whole image is resized to it and ``crop``
    (``top, left, height, width``) is taken from the result; without, ``crop`` is taken from the image as it is
    and resized to ``size``. ``flip``: mirrored left to right, last."""

    crop: Tuple[int, int, int, int]
    size: Tuple[int, int]
    resize: Optional[Tuple[int, int]] = None
    flip: bool = False

    def reduction(self, width: int, height: int) -> int:
        """The largest of 8, 4, 2 (else 1) that an image of ``width`` x ``height`` may be decoded smaller by and
        still be downscaled, never enlarged, to what the plan makes of it: a reduced decode is then only a
        coarser first step of the same downscaling (libjpeg-turbo's DCT scaling averages, it does not drop
        pixels)."""
        if self.resize is not None:
            room = min(width / self.resize[1], height / self.resize[0])
        else:
            room = min(self.crop[3] / self.size[1], self.crop[2] / self.size[0])
        return next((factor for factor in REDUCTIONS if room >= factor), 1)

    def apply(self, image: torch.Tensor, original: Optional[Tuple[int, int]] = None) -> torch.Tensor:
        """The plan applied to ``image`` (``C, H, W``; uint8 or float). ``original`` is ``(width, height)`` of the
        image the plan was drawn for, when ``image`` was decoded smaller than that: the crop is scaled to it."""
        if self.resize is not None:
            image = F.resize(image, list(self.resize), antialias=True)
            top, left, height, width = self.crop
            image = F.crop(image, top, left, height, width)
        else:
            top, left, height, width = self.crop if original is None else self.scaled_crop(*image.shape[-2:], original)
            image = F.resize(_pixel_rows(F.crop(image, top, left, height, width)), list(self.size), antialias=True)
        return F.horizontal_flip(image) if self.flip else image

    def scaled_crop(self, rows: int, columns: int, original: Tuple[int, int]) -> Tuple[int, int, int, int]:
        """The crop (``top, left, height, width``) in the image of ``rows`` x ``columns`` pixels that the image of
        ``original`` size (``(width, height)``) the plan was drawn for was decoded to."""
        scale_y, scale_x = rows / original[1], columns / original[0]
        top, left, height, width = self.crop
        top, left = min(round(top * scale_y), rows - 1), min(round(left * scale_x), columns - 1)
        return (top, left, max(1, min(round(height * scale_y), rows - top)),
                max(1, min(round(width * scale_x), columns - left)))


def _pixel_rows(image: torch.Tensor) -> torch.Tensor:
    """A uint8 ``(C, H, W)`` crop on the CPU copied to contiguous ``(H, W, C)`` memory (the view keeps its shape):
    torch's antialiased uint8 resize reads that layout fastest, and a crop of a decoded image is a strided view of
    it. Other images as they are."""
    if image.dtype != torch.uint8 or image.device.type != "cpu":
        return image
    return image.permute(1, 2, 0).contiguous().permute(2, 0, 1)


def sample_plan(recipe: Recipe, width: int, height: int) -> Plan:
    """One image's plan under ``recipe``, for an image of ``width`` x ``height`` pixels (random when training)."""
    out_h, out_w = recipe.size
    if recipe.augmentation == "imagenet" and recipe.train:
        top, left, crop_h, crop_w = random_resized_crop(height, width, recipe.crop_scale)
        return Plan(crop=(top, left, crop_h, crop_w), size=recipe.size, flip=_flip(recipe))
    if recipe.augmentation == "imagenet":  # Resize(shorter side), then CenterCrop
        side = recipe.resized_side()
        short, long = min(width, height), max(width, height)
        new_short, new_long = side, int(side * long / short)
        resize = (new_short, new_long) if height <= width else (new_long, new_short)
    else:  # Resize([h, w] / crop_ratio), then RandomCrop or CenterCrop
        resize = (round(out_h / recipe.crop_ratio), round(out_w / recipe.crop_ratio))
    resize = (max(resize[0], out_h), max(resize[1], out_w))
    if recipe.train:
        top = int(torch.randint(0, resize[0] - out_h + 1, size=(1,)))
        left = int(torch.randint(0, resize[1] - out_w + 1, size=(1,)))
    else:  # CenterCrop's rounding
        top, left = int(round((resize[0] - out_h) / 2.0)), int(round((resize[1] - out_w) / 2.0))
    return Plan(crop=(top, left, out_h, out_w), size=recipe.size, resize=resize, flip=_flip(recipe))


def random_resized_crop(height: int, width: int, scale) -> Tuple[int, int, int, int]:
    """``(top, left, height, width)`` of a random crop of ``scale`` (min, max) of the area with an aspect ratio in
    ``ASPECT_RATIOS``: what ``RandomResizedCrop.get_params`` draws, from the same random stream in the same
    order (the same values, to the bit), with half of its tensor operations; after 10 misses the central crop."""
    area = height * width
    for _ in range(10):
        target_area = area * torch.empty(1).uniform_(scale[0], scale[1]).item()
        aspect_ratio = torch.empty(1).uniform_(*_LOG_ASPECT_RATIOS).exp_().item()
        crop_w = int(round(math.sqrt(target_area * aspect_ratio)))
        crop_h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < crop_w <= width and 0 < crop_h <= height:
            top = int(torch.randint(0, height - crop_h + 1, size=(1,)))
            left = int(torch.randint(0, width - crop_w + 1, size=(1,)))
            return top, left, crop_h, crop_w
    ratio = width / height
    crop_w, crop_h = width, height
    if ratio < min(ASPECT_RATIOS):
        crop_h = int(round(width / min(ASPECT_RATIOS)))
    elif ratio > max(ASPECT_RATIOS):
        crop_w = int(round(height * max(ASPECT_RATIOS)))
    return (height - crop_h) // 2, (width - crop_w) // 2, crop_h, crop_w


def _flip(recipe) -> bool:
    """Drawn after the crop, as RandomHorizontalFlip after the crop's transform."""
    return recipe.train and recipe.hflip and bool(torch.rand(1) < 0.5)
