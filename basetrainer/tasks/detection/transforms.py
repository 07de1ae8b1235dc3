"""The detection task's image transforms, from ``torchvision.transforms.v2``: the boxes move with the pixels.

Training: a random rescale by a factor in ``scale_jitter`` (the image fits ``input_size`` times the
factor, its aspect kept), a random crop back to ``input_size`` (padded with black where the image is
smaller), a horizontal flip when ``hflip``; boxes cut to less than 2 pixels by the crop are dropped with
their labels. Evaluation: the image as it is. Both end with float pixels in [0, 1]; the model resizes
them to its input size, normalises them with ``rgb_mean``/``rgb_std``
(:mod:`basetrainer.tasks.detection.models`) and gives its boxes back in the image's own pixels, so that
predictions and the annotation file agree.
"""
import torch

MIN_BOX_SIDE = 2.0  # pixels: a box the crop cut thinner than this has no object left to find


def build_transform(cfg, train: bool):
    """``transform(image, target)`` for training (``train``) or evaluation, from ``cfg``'s ``input_size``,
    ``scale_jitter`` and ``hflip``; ``target`` is a dict holding ``boxes`` (``tv_tensors.BoundingBoxes``)
    and ``labels``."""
    from torchvision.transforms import v2

    if not train:
        return v2.ToDtype(torch.float32, scale=True)
    width, height = cfg["input_size"]
    low, high = cfg["scale_jitter"]
    steps = [v2.ScaleJitter((height, width), scale_range=(low, high)),
             v2.RandomCrop((height, width), pad_if_needed=True)]
    if cfg["hflip"]:
        steps.append(v2.RandomHorizontalFlip())
    steps += [v2.SanitizeBoundingBoxes(min_size=MIN_BOX_SIDE), v2.ToDtype(torch.float32, scale=True)]
    return v2.Compose(steps)
