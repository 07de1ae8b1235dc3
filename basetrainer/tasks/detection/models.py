"""Detectors by name: torchvision's, trained from scratch offline, and ``fcos_tiny``, the small default.

Every model takes a list of images and, in training, a list of target dicts (``boxes`` x1 y1 x2 y2 in
pixels, ``labels``); it returns a dict of named losses in train mode and a list of ``{"boxes", "scores",
"labels"}`` in eval mode, as torchvision's detection models do. Label 0 is the background: a data set
of ``num_classes`` categories has labels 1 to ``num_classes`` and the model ``num_classes + 1``
outputs, for every family alike.

``fcos_tiny`` is torchvision's FCOS on a 4-convolution backbone (0.40M parameters, against 2.3M for
``ssdlite320_mobilenet_v3_large``, 19M for ``fasterrcnn_mobilenet_v3_large_320_fpn`` and 32M for
``retinanet_resnet50_fpn`` with 10 classes) with two feature levels, strides 4 and 8: with the task's
defaults it reached a test ``mAP@0.5`` of 0.67 on the generated digit scenes after 3 epochs, 154 s of
training on one thread of a 2-core CPU (``bench/RESULTS.md``).
"""
import difflib
import os
from collections import OrderedDict

from torch import nn

from ...checkpoint.weights import load_weights
from ...errors import ConfigError
from ...utils.log import get_logger

logger = get_logger()

TINY = "fcos_tiny"
# torchvision's box detectors; masks and keypoints need targets this task does not read.
TORCHVISION_DETECTORS = ("fasterrcnn_mobilenet_v3_large_320_fpn", "fasterrcnn_mobilenet_v3_large_fpn",
                         "fasterrcnn_resnet50_fpn", "fasterrcnn_resnet50_fpn_v2", "fcos_resnet50_fpn",
                         "retinanet_resnet50_fpn", "retinanet_resnet50_fpn_v2", "ssd300_vgg16",
                         "ssdlite320_mobilenet_v3_large")
DETECTORS = (TINY, *TORCHVISION_DETECTORS)
# The names of each family's losses, in the dict its models return in train mode.
LOSS_NAMES = {"fcos": ("classification", "bbox_regression", "bbox_ctrness"),
              "retinanet": ("classification", "bbox_regression"), "ssd": ("bbox_regression", "classification"),
              "fasterrcnn": ("loss_classifier", "loss_box_reg", "loss_objectness", "loss_rpn_box_reg")}
TINY_WIDTH = 64
# fcos_tiny keeps boxes scored from 0.05 (torchvision's FCOS: 0.2), as COCO evaluations do: mAP averages precision
# down to low recall thresholds, and an early model's scores start near sqrt(0.01 x 0.5), FCOS's prior times its
# centre-ness.
EVALUATION_SCORE = 0.05  # a multiple of 32: FCOS's head normalises with GroupNorm(32, width)


def detector_name(name: str) -> str:
    """``name`` as listed in ``DETECTORS`` (any case); a ConfigError suggesting the closest otherwise."""
    if isinstance(name, str) and name.lower() in DETECTORS:
        return name.lower()
    close = difflib.get_close_matches(str(name).lower(), DETECTORS, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"choose one of {', '.join(DETECTORS)}"
    raise ConfigError(f"{name!r} is not a detection model; {hint}")


def loss_names(net_type: str) -> tuple:
    """The names of the losses ``net_type`` returns in train mode."""
    name = detector_name(net_type)
    return next(names for family, names in LOSS_NAMES.items() if name.startswith(family))


def get_detector(net_type: str, num_classes: int, input_size, rgb_mean, rgb_std, pretrained=None) -> nn.Module:
    """The detector ``net_type`` for ``num_classes`` categories (plus the background), with random weights,
    or those of the file ``pretrained`` (layers of another shape, the heads for other classes, stay fresh).
    Images are normalised with ``rgb_mean``/``rgb_std`` and reach the network at ``input_size``
    ``[width, height]`` (the shorter side, for the R-CNN, RetinaNet and FCOS families; SSD has its own)."""
    name = detector_name(net_type)
    normalise = {"image_mean": list(rgb_mean), "image_std": list(rgb_std)}
    if not name.startswith("ssd"):
        normalise.update(min_size=min(input_size), max_size=max(input_size))
    if name == TINY:
        model = tiny_fcos(num_classes + 1, score_thresh=EVALUATION_SCORE, **normalise)
    else:
        from torchvision.models import get_model

        model = get_model(name, weights=None, weights_backbone=None, num_classes=num_classes + 1, **normalise)
    if pretrained:
        if not os.path.isfile(pretrained):
            raise ConfigError(f"pretrained={str(pretrained)!r}: no such file; give a weights file or false")
        report = load_weights(model, os.fspath(pretrained), name=os.fspath(pretrained))
        kept = f"; fresh weights for {', '.join(report['skipped'])}" if report["skipped"] else ""
        logger.info("pretrained: loaded %s%s", pretrained, kept)
    return model


def without_background(predictions) -> list:
    """``predictions`` without boxes of label 0: FCOS and RetinaNet score every output with a sigmoid, the
    background's too, and an early model may rank a background box (trained, its scores fall below the
    threshold)."""
    return [{key: value[prediction["labels"] > 0] for key, value in prediction.items()} for prediction in predictions]


def tiny_fcos(num_classes: int, **kwargs) -> nn.Module:
    """FCOS on :class:`TinyBackbone`, one location per cell at strides 4 and 8 (sizes 8 and 16: objects up to
    32 pixels from their centre to a side are assigned to the finer level)."""
    from torchvision.models.detection import FCOS
    from torchvision.models.detection.anchor_utils import AnchorGenerator

    anchors = AnchorGenerator(sizes=((8,), (16,)), aspect_ratios=((1.0,), (1.0,)))
    return FCOS(TinyBackbone(TINY_WIDTH), num_classes=num_classes, anchor_generator=anchors, **kwargs)


class TinyBackbone(nn.Module):
    """Four 3x3 convolutions to ``width`` channels at stride 4, and one more to stride 8: the two feature maps
    (``"0"``, ``"1"``) a torchvision detection head reads, with ``out_channels`` as it expects."""

    def __init__(self, width: int):
        super().__init__()
        self.body = nn.Sequential(_conv(3, 16, 2), _conv(16, 32, 2), _conv(32, width, 1), _conv(width, width, 1))
        self.down = _conv(width, width, 2)
        self.out_channels = width

    def forward(self, images):
        fine = self.body(images)
        return OrderedDict([("0", fine), ("1", self.down(fine))])


def _conv(inputs: int, outputs: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False), nn.BatchNorm2d(outputs),
                         nn.ReLU(inplace=True))
