"""``basetrainer export`` of a detector that the detection task saved: an ONNX file, checked with onnxruntime.

::

    basetrainer export work_dirs/detection/model/model_final.pth --out detector.onnx

or in code, ``export_detector(read_saved_model(path), "detector.onnx")``
(:func:`basetrainer.export.from_checkpoint.read_saved_model` reads ``last.pth``, with an EMA average
preferred, ``model_final.pth`` and the best models, as for a classifier). The detector is rebuilt from the
run's config (``net_type``, ``num_classes``, ``input_size``, normalisation) and exported with torch's
TorchScript-based exporter (``dynamo=False``), which carries torchvision's resizing, box decoding and
non-maximum suppression into the graph. The file takes one image, ``image``: ``(3, height, width)`` at the
run's ``input_size``, values in [0, 1], and returns ``boxes`` (x1 y1 x2 y2 in that image's pixels),
``scores`` and ``labels`` (1 to ``num_classes``; the background's boxes are left out, as ``predict`` leaves
them out). The check runs the file on one of the run's own images (the first of ``test_images``, else of
``train_images``; a random image when neither folder is there any more) and compares with torch: the same
number of boxes and labels, boxes and scores within ``atol``.
"""
import os

import torch
from torch import nn

from ...checkpoint.weights import check_shapes
from ...errors import ConfigError
from ...export.exporter import ExportResult, largest_output
from ...export.onnx_tools import onnx_session, require, run_onnx
from ...utils.log import get_logger
from .models import get_detector, without_background
from .predict import MODEL_KEYS
from .settings import TASK_SETTINGS

logger = get_logger()

OPSET_VERSION = 17  # the TorchScript-based exporter's torchvision detection ops need 11 or later
OUTPUT_NAMES = ("boxes", "scores", "labels")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")


class SingleImageDetector(nn.Module):
    """A detector as one graph: one image ``(3, height, width)`` in, its ``boxes``, ``scores`` and ``labels``
    out, without the background's boxes."""

    def __init__(self, detector: nn.Module):
        super().__init__()
        self.detector = detector

    def forward(self, image):
        (prediction,) = without_background(self.detector([image]))
        return tuple(prediction[name] for name in OUTPUT_NAMES)


def export_detector(saved, path: str, format: str = "onnx", atol: float = 1e-3) -> ExportResult:
    """Writes the detector of ``saved`` (a :class:`~basetrainer.export.from_checkpoint.SavedModel` of a detection
    run) to ``path`` as ONNX and checks the file against torch on one of the run's images."""
    cfg = _model_config(saved)
    if format != "onnx":
        raise ConfigError(f"--format {format}: a detector ({cfg['net_type']}) exports as onnx only (--out "
                          f"model.onnx), or as its weights (--out weights.pth)")
    for module_name in ("onnx", "onnxruntime"):  # fail before the work, not after it
        require(module_name)
    detector = get_detector(cfg["net_type"], cfg["num_classes"], cfg["input_size"], cfg["rgb_mean"], cfg["rgb_std"])
    check_shapes(detector, saved.weights, saved.path)
    detector.load_state_dict(saved.weights)
    model = SingleImageDetector(detector).eval()
    image = _check_image(saved.config, cfg["input_size"])
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(model, (image,), path, dynamo=False, opset_version=OPSET_VERSION, input_names=["image"],
                          output_names=list(OUTPUT_NAMES))
        expected = model(image)
    actual = [torch.from_numpy(output) for output in run_onnx(onnx_session(path), [image])]
    result = ExportResult(path, "onnx", batch_size=1, max_abs_diff=_max_abs_diff(expected, actual), atol=atol,
                          largest=largest_output(list(expected[:2])))  # boxes and scores
    if not result.passed:
        logger.warning("%s: %s", path, result)
    return result


def _model_config(saved) -> dict:
    """The keys that rebuild the detector, from the run's config, checked as the task checks them."""
    return TASK_SETTINGS.check({key: saved.config.get(key, TASK_SETTINGS[key].default) for key in MODEL_KEYS},
                               f"in the config saved with {saved.path}")


def _check_image(config: dict, input_size) -> torch.Tensor:
    """The first image of the run's test, else train, folder at ``input_size``, as the exported graph takes it."""
    from torchvision.transforms.v2 import functional

    width, height = input_size
    for folder in (config.get("test_images"), config.get("train_images")):
        names = sorted(name for name in os.listdir(folder) if name.lower().endswith(IMAGE_SUFFIXES)) \
            if folder and os.path.isdir(folder) else []
        if names:
            from PIL import Image

            with Image.open(os.path.join(folder, names[0])) as picture:
                image = functional.to_dtype(functional.to_image(picture.convert("RGB")), torch.float32, scale=True)
            logger.info("checking the ONNX file against torch on %s", os.path.join(folder, names[0]))
            return functional.resize(image, [height, width], antialias=True)
    logger.info("neither the test nor the train images of the run are there: checking on a random image")
    return torch.rand(3, height, width, generator=torch.Generator().manual_seed(0))


def _max_abs_diff(expected, actual) -> float:
    """The largest difference of the boxes and scores; infinite when the boxes or their labels differ."""
    if [tuple(e.shape) for e in expected] != [tuple(a.shape) for a in actual] or \
            not torch.equal(expected[2], actual[2].to(expected[2].dtype)):
        return float("inf")
    return max((float((e - a).abs().max()) for e, a in zip(expected[:2], actual[:2]) if e.numel()), default=0.0)
