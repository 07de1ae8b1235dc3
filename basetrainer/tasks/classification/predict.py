"""``basetrainer predict``: a trained classifier's top classes for every image under a folder, as CSV.

::

    basetrainer predict --checkpoint work_dirs/classification/model/model_final.pth --data photos/ \\
        --out predictions.csv --topk 3

``--data`` is a folder of images, or an ImageFolder tree (one sub-folder per class): every
image under it is predicted, in sorted path order. The model, its input size, its
normalisation and its class names come from the run that wrote the checkpoint (see
:func:`basetrainer.export.model_from_checkpoint`). Each CSV row is the image's path
(relative to ``--data``), then the ``k`` most likely classes, each with its softmax score.
"""
import csv
import os

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision.datasets.folder import IMG_EXTENSIONS

from ...config import Config
from ...data.folder import image_error_reason
from ...errors import CheckpointError, ConfigError, DataError
from ...export import model_from_checkpoint
from ...utils.file_utils import atomic_write
from ..common.predictor import Predictor
from .config import TRANSFORM_KEYS, check_transform, unset_data_defaults
from .settings import TASK_SETTINGS
from .trainer import build_transform


class ImageFiles(Dataset):
    """The images at ``paths``, transformed; the target of each is its index in ``paths``."""

    def __init__(self, paths, transform):
        self.paths, self.transform = list(paths), transform

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        path = self.paths[index]
        try:
            with Image.open(path) as image:
                image = image.convert("RGB")
        except Exception as error:  # noqa: BLE001 - Pillow fails on bad files in many ways
            raise DataError(f"--data: cannot read image {path} ({image_error_reason(error)}); fix or remove the "
                            f"file") from None
        return self.transform(image), index


def _transform_config(saved: dict, checkpoint) -> Config:
    """The run's config as far as predicting reads it, checked as a config file would be: a key the run did not
    save (an older version) takes its declared default."""
    cfg = Config({key: TASK_SETTINGS[key].default for key in TRANSFORM_KEYS})
    cfg.update(saved)
    cfg.update(unset_data_defaults(cfg))
    try:
        check_transform(cfg, lambda key: f"in the config saved with {checkpoint}")
        TASK_SETTINGS.check({key: cfg.get(key) for key in ("classes", "num_classes")},
                            f"in the config saved with {checkpoint}")
    except ConfigError as error:
        raise CheckpointError(str(error)) from None
    if cfg.get("classes") is not None and len(cfg["classes"]) != cfg["num_classes"]:
        raise CheckpointError(f"the config saved with {checkpoint} names {len(cfg['classes'])} classes for a model "
                              f"of {cfg['num_classes']} outputs; it was edited or not written by the classification "
                              f"task")
    return cfg


def image_paths(root) -> list:
    """Every image file under ``root``, sorted; a one-line DataError when there is none."""
    if not os.path.isdir(root):
        raise DataError(f"--data: no such folder {root}; give a folder of images or an ImageFolder tree")
    paths = sorted(os.path.join(folder, name) for folder, _, names in os.walk(root) for name in names
                   if name.lower().endswith(IMG_EXTENSIONS))
    if not paths:
        raise DataError(f"--data: {root} holds no image ({', '.join(IMG_EXTENSIONS)}); point it at the images")
    return paths


def predict_images(checkpoint, data, out, topk=1, batch_size=64, gpu_id=None) -> int:
    """Writes one CSV row per image under ``data`` to ``out``; returns the number of rows."""
    loaded = model_from_checkpoint(checkpoint)
    cfg = _transform_config(loaded.config, checkpoint)
    classes = list(cfg.get("classes") or range(cfg["num_classes"]))
    topk = max(1, min(int(topk), len(classes)))
    paths = image_paths(data)
    loader = DataLoader(ImageFiles(paths, build_transform(cfg, train=False)), batch_size=batch_size)
    logits = Predictor(loaded.model, gpu_id).predict(loader)
    scores, indices = torch.softmax(logits.float(), dim=1).topk(topk, dim=1)
    header = ["path"] + [f"{column}_{k}" if topk > 1 else column for k in range(1, topk + 1)
                         for column in ("class", "score")]
    with atomic_write(out) as stream:
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow(header)
        for path, row_scores, row_indices in zip(paths, scores.tolist(), indices.tolist()):
            cells = [value for index, score in zip(row_indices, row_scores) for value in (classes[index], f"{score:.6f}")]
            writer.writerow([os.path.relpath(path, data), *cells])
    return len(paths)

