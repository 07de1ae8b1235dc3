"""``basetrainer predict --task detection``: a trained detector's boxes on the images of a COCO annotation file,
written as a COCO results file.

::

    basetrainer predict --task detection --checkpoint work_dirs/detection/model/model_final.pth \\
        --images D/val2017 --annotations D/annotations/instances_val2017.json --out results.json

The detector is rebuilt from the run's ``config.yaml`` beside the checkpoint's ``model/`` folder (its
``net_type``, ``num_classes``, ``input_size`` and normalisation), and the weights of ``--checkpoint``
(``model_final.pth``, a best model, or ``last.pth``) loaded into it, every layer of the same shape. The
annotation file names the images (its boxes are not read) and gives the image and category ids of
the results (:func:`.results.coco_results`); its categories must be the ones the model was trained on.
"""
import argparse
import os

from ...checkpoint.weights import load_weights
from ...config import load_config
from ...errors import BaseTrainerError, CheckpointError, DataError
from ...utils.console import exit_with
from ...utils.file_utils import check_writable_file
from ..common.predictor import Predictor
from .coco import CocoDetection, collate_detection
from .models import get_detector
from .results import write_coco_results
from .settings import TASK_SETTINGS
from .transforms import build_transform

MODEL_KEYS = ("net_type", "num_classes", "input_size", "rgb_mean", "rgb_std")


def run_config(checkpoint) -> dict:
    """The keys of ``MODEL_KEYS`` from the ``config.yaml`` of the run that wrote ``checkpoint``, checked."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(checkpoint))), "config.yaml")
    if not os.path.isfile(path):
        raise CheckpointError(f"no config.yaml beside the model/ folder of {checkpoint}; give a model file of a "
                              f"detection run (work_dir/model/...)")
    saved = load_config(path)
    if saved.get("num_classes") is None:
        raise CheckpointError(f"{path} has no num_classes; it was not written by a detection run")
    return TASK_SETTINGS.check({key: saved.get(key, TASK_SETTINGS[key].default) for key in MODEL_KEYS},
                               f"in {path}")


def predict_coco(checkpoint, images, annotations, out, batch_size=16, gpu_id=None) -> int:
    """Writes the detector's boxes on every image that ``annotations`` lists (in ``images``) to ``out``;
    returns the number of boxes."""
    cfg = run_config(checkpoint)
    dataset = CocoDetection(images, annotations, transform=build_transform(cfg, train=False), name="--annotations",
                            images_name="--images")
    if dataset.num_classes != cfg["num_classes"]:
        raise DataError(f"--annotations: {annotations} has {dataset.num_classes} categories, the model "
                        f"{cfg['num_classes']}; give the annotation file of the data it was trained on")
    model = get_detector(cfg["net_type"], cfg["num_classes"], cfg["input_size"], cfg["rgb_mean"], cfg["rgb_std"])
    load_weights(model, os.fspath(checkpoint), strict=True)
    from torch.utils.data import DataLoader

    loader = DataLoader(dataset, batch_size=batch_size, collate_fn=collate_detection)
    return write_coco_results(Predictor(model, gpu_id), loader, out)


def get_parser(prog=None):
    parser = argparse.ArgumentParser(prog=prog, description="Write a trained detector's boxes on the images of a "
                                                            "COCO annotation file as a COCO results file.")
    parser.add_argument("--task", choices=("detection",), default="detection",
                        help="a detector's boxes (without --task, basetrainer predict runs a classifier, with flags "
                             "of its own: basetrainer predict --help)")
    parser.add_argument("--checkpoint", required=True, help="a model file of a detection run: model_final.pth, "
                                                            "best_model_*.pth or last.pth")
    parser.add_argument("--images", required=True, help="the folder the file_name of each image is relative to")
    parser.add_argument("--annotations", required=True, help="a COCO instances.json listing the images")
    parser.add_argument("--out", required=True, help="the COCO results file to write, e.g. results.json")
    parser.add_argument("--batch_size", type=int, default=16, help="images per batch")
    parser.add_argument("--gpu_id", type=int, default=None, help="the GPU to use (default: the CPU)")
    return parser


def main(argv=None, prog=None):
    """Command-line entry point: one line per outcome; a ``BaseTrainerError`` is its line and exit code."""
    args = get_parser(prog).parse_args(argv)
    try:
        check_writable_file(args.out, "--out")
        boxes = predict_coco(args.checkpoint, args.images, args.annotations, args.out, args.batch_size, args.gpu_id)
    except BaseTrainerError as error:
        exit_with(error)
    print(f"wrote {boxes} boxes to {args.out}")
