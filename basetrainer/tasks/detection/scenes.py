"""A detection data set made from the bundled digits: several digits on larger canvases, in COCO format.

Each canvas is black, with 1 to ``max_digits`` digits placed at random positions and sizes, none
overlapping another; each digit's box is the extent of its inked pixels, its category the digit. ::

    write_digit_scenes("data/digit_scenes")
    # data/digit_scenes/train/images/000000.png ...  data/digit_scenes/train/instances.json
    # data/digit_scenes/val/images/000000.png ...    data/digit_scenes/val/instances.json

The train canvases use the digits of the digits' train split, the val canvases those of its val split
(:func:`basetrainer.data.digits.split_indices`), so no digit is seen in both. Everything is drawn from
``seed`` with numpy's PCG64 stream and integer arithmetic (the digits are enlarged by nearest-neighbour
indexing, not by an image library's resampling), so the pixels and ``instances.json`` are the same
bytes on every machine. The tree appears complete or not at all: it is written beside ``root`` and
renamed into place, with a manifest (``scenes.json``) that lets a later call skip the work.
"""
import json
import os
import shutil
import tempfile

import numpy as np

from ...data.digits import CLASSES, load_digits, split_indices
from ...errors import DataError
from ...utils.log import get_logger

logger = get_logger()

MANIFEST = "scenes.json"
SPLIT_SIZES = {"train": 1200, "val": 300}
INSTANCES = "instances.json"
IMAGES = "images"


def write_digit_scenes(root, canvas=64, max_digits=4, digit_sizes=(14, 30), seed=0, split_sizes=None):
    """Writes the canvases of every split under ``root`` (``<split>/images/*.png`` and
    ``<split>/instances.json``); returns ``root``. ``digit_sizes`` is the range of a digit's side in
    pixels, ``split_sizes`` the number of canvases of ``train`` and ``val`` (default ``SPLIT_SIZES``). Does nothing when
    ``root`` holds a complete tree written with the same settings; refuses (DataError) a non-empty
    ``root`` that it did not write."""
    from PIL import Image

    root = os.fspath(root)
    if not set(split_sizes or SPLIT_SIZES) <= set(SPLIT_SIZES):
        raise DataError(f"split_sizes {split_sizes!r}: the digit scenes have the splits {', '.join(SPLIT_SIZES)}")
    settings = {"canvas": int(canvas), "max_digits": int(max_digits), "digit_sizes": [int(s) for s in digit_sizes],
                "seed": int(seed), "split_sizes": dict(split_sizes or SPLIT_SIZES)}
    if _manifest(root) == settings:
        return root
    if os.path.exists(root) and os.listdir(root) and _manifest(root) is None:
        raise DataError(f"{root} exists and is not a digit-scenes data set written by basetrainer; remove it or "
                        f"choose another folder")
    digits, labels = load_digits()
    rows = dict(zip(("train", "val"), split_indices(labels, seed=seed)))
    parent = os.path.dirname(os.path.abspath(root))
    os.makedirs(parent, exist_ok=True)
    partial = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(root))}.", suffix=".partial", dir=parent)
    try:
        for split, count in settings["split_sizes"].items():
            rng = np.random.Generator(np.random.PCG64([seed, list(SPLIT_SIZES).index(split)]))
            os.makedirs(os.path.join(partial, split, IMAGES))
            images, annotations = [], []
            for index in range(count):
                pixels, boxes = draw_scene(rng, digits, labels, rows[split], canvas, max_digits, digit_sizes)
                name = f"{index:06d}.png"
                Image.fromarray(pixels).save(os.path.join(partial, split, IMAGES, name))
                images.append({"id": index + 1, "file_name": name, "width": canvas, "height": canvas})
                for label, (x, y, w, h) in boxes:
                    annotations.append({"id": len(annotations) + 1, "image_id": index + 1, "category_id": label,
                                        "bbox": [x, y, w, h], "area": w * h, "iscrowd": 0})
            categories = [{"id": label, "name": name} for label, name in enumerate(CLASSES)]
            with open(os.path.join(partial, split, INSTANCES), "w", encoding="utf-8") as stream:
                json.dump({"images": images, "annotations": annotations, "categories": categories}, stream)
        with open(os.path.join(partial, MANIFEST), "w", encoding="utf-8") as stream:
            json.dump(settings, stream, indent=1)
        if os.path.isdir(root):
            shutil.rmtree(root)
        os.replace(partial, root)
        logger.info("wrote %s canvases of handwritten digits to %s", " and ".join(
            f"{count} {split}" for split, count in settings["split_sizes"].items()), root)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return root


def draw_scene(rng, digits, labels, rows, canvas, max_digits, digit_sizes):
    """One canvas (uint8 ``(canvas, canvas)``) and its ``[(label, [x, y, w, h])]``: 1 to ``max_digits``
    digits from ``rows``, each tried at up to 20 random places until it overlaps none placed before."""
    pixels = np.zeros((canvas, canvas), dtype=np.uint8)
    taken = np.zeros((canvas, canvas), dtype=bool)
    boxes = []
    for _ in range(int(rng.integers(1, max_digits + 1))):
        row = int(rows[rng.integers(len(rows))])
        size = int(rng.integers(digit_sizes[0], digit_sizes[1] + 1))
        for _ in range(20):
            x, y = (int(v) for v in rng.integers(0, canvas - size + 1, size=2))
            if not taken[y:y + size, x:x + size].any():
                break
        else:
            continue
        digit = enlarge(digits[row], size)
        ink_rows, ink_columns = np.nonzero(digit)
        top, left = int(ink_rows.min()), int(ink_columns.min())
        height, width = int(ink_rows.max()) - top + 1, int(ink_columns.max()) - left + 1
        pixels[y:y + size, x:x + size] = digit
        taken[y + top:y + top + height, x + left:x + left + width] = True
        boxes.append((int(labels[row]), [x + left, y + top, width, height]))
    return pixels, boxes


def enlarge(digit, size):
    """An 8x8 digit (values 0..16) as ``size`` x ``size`` uint8 pixels 0..255, by nearest-neighbour indexing."""
    source = (np.arange(size) * digit.shape[0]) // size
    return ((digit[np.ix_(source, source)].astype(np.uint16) * 255 + 8) // 16).astype(np.uint8)


def _manifest(root):
    try:
        with open(os.path.join(root, MANIFEST), encoding="utf-8") as stream:
            return json.load(stream)
    except (OSError, ValueError):
        return None
