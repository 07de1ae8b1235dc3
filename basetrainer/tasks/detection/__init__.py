"""Object detection as a ready task, beside image classification; its parts, as detectron2 splits a detector's:

- data: :mod:`.scenes` (the generated digit scenes), :mod:`.coco` (a user's COCO data, checked, and the
  list collate), :mod:`~basetrainer.tasks.detection.transforms` (``torchvision.transforms.v2``: the boxes
  move with the images);
- modelling: :mod:`~basetrainer.tasks.detection.models` (detectors by name);
- evaluation: :mod:`.mean_ap` (COCO mAP over every rank's predictions), :mod:`.coco_evaluation` (pycocotools'
  COCOeval on a results list), :mod:`.results` (COCO results files);
- the pipeline: :mod:`~basetrainer.tasks.detection.settings` and :mod:`~basetrainer.tasks.detection.config`
  (its config keys and command line), :mod:`.trainer` (``DetectionTrainer`` and
  ``basetrainer train --task detection``).
"""
from .coco import CocoDetection, collate_detection, read_instances
from .config import get_parser, parse_config
from .mean_ap import MeanAPRecorder
from .models import DETECTORS, get_detector
from .scenes import write_digit_scenes
from .trainer import DetectionTrainer, main, run, train

__all__ = ["CocoDetection", "DETECTORS", "DetectionTrainer", "MeanAPRecorder", "collate_detection", "get_detector",
           "get_parser", "main", "parse_config", "read_instances", "run", "train", "write_digit_scenes"]
