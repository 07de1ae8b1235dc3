"""The handwritten digits as a small ImageFolder tree, so that examples and tests train on real images offline.

``digits.csv.gz`` holds the 1,797 8x8 greyscale digits (10 classes, pixel values 0..16)
of the UCI "Optical Recognition of Handwritten Digits" test set (E. Alpaydin,
C. Kaynak, 1998; CC BY 4.0), a verbatim copy of the file scikit-learn bundles
(BSD-3-Clause); see ``NOTICE`` next to this module. ::

    write_digits_imagefolder("data/digits")
    # data/digits/train/<digit>/<row>.png   80 % of each class
    # data/digits/val/<digit>/<row>.png     the other 20 %: the same split on every machine

The tree appears complete or not at all: it is written into a temporary folder beside
``root`` and renamed into place, and a manifest (``digits.json``, the settings and the
file counts) written before the rename lets a later call check it and skip the work.
"""
import gzip
import hashlib
import os
import shutil

import numpy as np

from ..errors import DataError
from ..utils.log import get_logger
from . import trees

logger = get_logger()

DIGITS_CSV = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits.csv.gz")
CLASSES = tuple(str(digit) for digit in range(10))
MANIFEST = "digits.json"
SPLITS = ("train", "val")


def load_digits():
    """``(images, labels)``: uint8 ``(1797, 8, 8)`` with values 0..16, and int64 ``(1797,)`` digits."""
    with gzip.open(DIGITS_CSV, "rt") as stream:
        table = np.loadtxt(stream, delimiter=",", dtype=np.int64)
    return table[:, :-1].reshape(-1, 8, 8).astype(np.uint8), table[:, -1]


def split_indices(labels, val_fraction=0.2, seed=0):
    """``(train, val)`` row indices, sorted: ``val_fraction`` of every class (rounded) goes to val.

    Rows are shuffled by a hash of ``seed`` and their index, not by a random generator, so
    the split is the same on every machine and with every numpy version.
    """
    if not 0.0 < val_fraction < 1.0:
        raise DataError(f"val_fraction must lie strictly between 0 and 1, got {val_fraction}")
    train, val = [], []
    for label in np.unique(labels):
        rows = sorted(np.flatnonzero(labels == label).tolist(),
                      key=lambda row: hashlib.sha256(f"{seed}:{row}".encode()).digest())
        num_val = int(round(len(rows) * val_fraction))
        val.extend(rows[:num_val])
        train.extend(rows[num_val:])
    return np.sort(np.array(train, dtype=np.int64)), np.sort(np.array(val, dtype=np.int64))


def write_digits_imagefolder(root, val_fraction=0.2, seed=0, scale=4):
    """Writes the digits under ``root`` as ``train/<digit>/<row>.png`` and ``val/<digit>/<row>.png``.

    Images are upscaled ``scale`` times (bilinear: 32x32 for the default 4) and saved as
    8-bit greyscale PNG; ``<row>`` is the line of ``digits.csv.gz``. Returns ``root``.
    Does nothing when ``root`` already holds a complete tree written with the same
    settings; rewrites a tree of its own that is incomplete or differs; refuses (DataError)
    a non-empty ``root`` that it did not write.
    """
    from PIL import Image

    root = os.fspath(root)
    settings = {"val_fraction": float(val_fraction), "seed": int(seed), "scale": int(scale)}
    if is_complete(root, settings):
        return root
    if os.path.exists(root) and not _replaceable(root):
        raise DataError(f"{root} exists and is not a digits dataset written by basetrainer; "
                        f"remove it or choose another folder")
    images, labels = load_digits()
    splits = dict(zip(SPLITS, split_indices(labels, val_fraction, seed)))
    partial = trees.partial_folder(root)
    try:
        counts = {}
        for split, rows in splits.items():
            counts[split] = {name: 0 for name in CLASSES}
            for name in CLASSES:
                os.makedirs(os.path.join(partial, split, name))
            for row in rows:
                name = CLASSES[labels[row]]
                pixels = (images[row].astype(np.uint16) * 255 + 8) // 16  # 0..16 -> 0..255
                image = Image.fromarray(pixels.astype(np.uint8))
                if scale != 1:
                    image = image.resize((8 * scale, 8 * scale), Image.BILINEAR)
                image.save(os.path.join(partial, split, name, f"{row:04d}.png"))
                counts[split][name] += 1
        trees.write_manifest(partial, MANIFEST, settings, counts)
        if _move_into_place(partial, root, settings):
            logger.info("wrote %d handwritten digits to %s (train %d, val %d)", len(labels), root,
                        len(splits["train"]), len(splits["val"]))
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return root


def is_complete(root, settings=None) -> bool:
    """Whether ``root`` holds every file its manifest lists (and, if given, was written with ``settings``)."""
    return trees.is_complete(root, MANIFEST, ".png", settings)


def _replaceable(root) -> bool:
    return trees.replaceable(root, MANIFEST)


def _move_into_place(partial, root, settings) -> bool:
    """Renames ``partial`` to ``root``; False when another process got there first."""
    return trees.move_into_place(partial, root, MANIFEST, ".png", settings)
