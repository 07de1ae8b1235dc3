"""The bundled digits as photographs: a JPEG ImageFolder with the pixel and file sizes of real photos, offline.

Each picture is one of the 1,797 handwritten digits (:mod:`basetrainer.data.digits`) drawn large (55-85% of
the shorter side, turned by up to 15 degrees, in a colour that stands out from what lies behind it) on a
photograph-like background: a coloured field of coarse and fine noise, a few half-transparent shapes, sensor
grain. ::

    write_photo_digits("data/photo_digits")  # or: python -m basetrainer.data.images.photo_digits DIR
    # data/photo_digits/train/<digit>/<row>.jpg   80% of each digit (the digits' own split)
    # data/photo_digits/val/<digit>/<row>.jpg     the other 20%

The sizes are those of ImageNet's photographs, which come mostly from Flickr's 500-pixel renditions: the longer
side is 500 pixels for half of the pictures and 300 to 500 for the others, landscape three times in four, with
aspect ratios of 4:3, 3:2, 5:4 and 1:1; JPEG quality 90 with 4:2:0 chroma. The whole set: 450 x 350 pixels
(longer x shorter side) and 98 KB a picture on average (ImageNet's training set: about 400 x 350 and 110 KB),
180 MB in all.

Everything is drawn from ``seed`` and the digit's row (numpy's PCG64), so a picture does not depend on which
others are written (``per_class``); its bytes depend on Pillow's resampling and JPEG encoder, the same for a given
Pillow. The tree appears complete or not at all, with a manifest (:mod:`basetrainer.data.trees`).
"""
import argparse
import multiprocessing
import os
import shutil

import numpy as np

from ...errors import DataError
from ...utils.log import get_logger
from .. import trees
from ..digits import CLASSES, load_digits, split_indices

logger = get_logger()

MANIFEST = "photo_digits.json"
SUFFIX = ".jpg"
SPLITS = ("train", "val")
ASPECTS = ((4, 3), (3, 2), (5, 4), (1, 1))
GRAIN = 0.45  # the share of full-resolution noise in the background: what makes the files as large as photos'


def write_photo_digits(root, seed=0, per_class=None, quality=90, size_factor=1.0, val_fraction=0.2, repeats=1,
                       processes=1):
    """Writes the pictures under ``root`` as ``train/<digit>/<row>.jpg`` and ``val/<digit>/<row>.jpg``; returns
    ``root``. ``per_class``: at most that many digits of each class in each split (None: all 1,797 digits);
    ``size_factor`` scales every picture's sides (tests write small ones); ``repeats``: each digit drawn that many
    times on other backgrounds (``<row>_<k>.jpg`` for the k-th after the first), a larger set for benchmarks;
    ``processes``: drawn by that many processes. Does nothing when ``root`` holds a complete tree written with the
    same settings; rewrites a tree of its own that is incomplete or differs; refuses (DataError) a non-empty
    ``root`` that it did not write."""
    root = os.fspath(root)
    settings = {"seed": int(seed), "per_class": per_class, "quality": int(quality),
                "size_factor": float(size_factor), "val_fraction": float(val_fraction), "repeats": int(repeats)}
    if trees.is_complete(root, MANIFEST, SUFFIX, settings):
        return root
    if os.path.exists(root) and not trees.replaceable(root, MANIFEST):
        raise DataError(f"{root} exists and is not a photo-digits dataset written by basetrainer; remove it or "
                        f"choose another folder")
    digits, labels = load_digits()
    splits = dict(zip(SPLITS, split_indices(labels, val_fraction, seed)))
    partial = trees.partial_folder(root)
    try:
        counts, jobs = {}, []
        for split, rows in splits.items():
            counts[split] = {name: 0 for name in CLASSES}
            for name in CLASSES:
                os.makedirs(os.path.join(partial, split, name))
            for row in rows:
                name = CLASSES[labels[row]]
                if per_class is not None and counts[split][name] >= per_class * repeats:
                    continue
                for copy in range(repeats):
                    stem = f"{row:04d}" if copy == 0 else f"{row:04d}_{copy}"
                    jobs.append((os.path.join(partial, split, name, stem + SUFFIX), digits[row], seed, int(row),
                                 copy, size_factor, quality))
                counts[split][name] += repeats
        if processes > 1:
            with multiprocessing.get_context("fork").Pool(processes) as pool:
                sizes = pool.map(_write_one, jobs, chunksize=16)
        else:
            sizes = [_write_one(job) for job in jobs]
        trees.write_manifest(partial, MANIFEST, settings, counts)
        if trees.move_into_place(partial, root, MANIFEST, SUFFIX, settings):
            logger.info("wrote %d photo-like JPEGs of the digits to %s (%.0f KB on average)", len(sizes), root,
                        np.mean(sizes) / 1024)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return root


def _write_one(job) -> int:
    """Draws and saves one picture; returns its file's size."""
    path, digit, seed, row, copy, size_factor, quality = job
    rng = np.random.default_rng([seed, row] if copy == 0 else [seed, row, copy])
    draw_photo(digit, rng, size_factor).save(path, quality=quality, subsampling="4:2:0")
    return os.path.getsize(path)


def photo_size(rng, size_factor=1.0) -> tuple:
    """``(width, height)`` of a picture, as ImageNet's are distributed (see the module docstring)."""
    longer = 500 if rng.random() < 0.5 else int(rng.integers(300, 501))
    wide, narrow = ASPECTS[int(rng.choice(len(ASPECTS), p=(0.55, 0.2, 0.1, 0.15)))]
    shorter = round(longer * narrow / wide)
    width, height = (longer, shorter) if rng.random() < 0.75 else (shorter, longer)
    return max(16, round(width * size_factor)), max(16, round(height * size_factor))


def draw_photo(digit, rng, size_factor=1.0):
    """A Pillow RGB picture of ``digit`` (8 x 8, values 0..16) on a photograph-like background."""
    from PIL import Image, ImageDraw

    width, height = photo_size(rng, size_factor)
    picture = _noise(rng, width, height, 3, 3)
    for cells, weight in ((6, 0.5), (width // 24, 0.35), (width // 6, 0.25), (width // 2, GRAIN)):
        cells = max(2, cells)
        picture = Image.blend(picture, _noise(rng, width, height, cells, max(2, cells * height // width)), weight)
    cluttered = picture.copy()
    shapes = ImageDraw.Draw(cluttered)
    for _ in range(int(rng.integers(2, 7))):
        left, top = int(rng.integers(0, width)), int(rng.integers(0, height))
        side = int(rng.integers(4, max(5, width // 4)))
        box = [left, top, left + side, top + int(side * rng.uniform(0.5, 1.5))]
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        (shapes.ellipse if rng.random() < 0.5 else shapes.rectangle)(box, fill=colour)
    picture = Image.blend(picture, cluttered, 0.5)  # half-transparent clutter, behind the digit
    side = int(min(width, height) * rng.uniform(0.55, 0.85))
    glyph = (digit.astype(np.float32) / 16).clip(0, 1)
    ink = Image.fromarray((glyph * 255).astype(np.uint8)).resize((side, side), Image.BICUBIC)
    ink = Image.fromarray((np.clip(np.asarray(ink, np.float32) / 255 - 0.25, 0, 0.5) * 510).astype(np.uint8))
    ink = ink.rotate(float(rng.uniform(-15, 15)), Image.BILINEAR)  # strokes with crisp edges, turned a little
    left, top = int(rng.integers(0, width - side + 1)), int(rng.integers(0, height - side + 1))
    behind = np.asarray(picture.crop((left, top, left + side, top + side)).resize((1, 1), Image.BOX)).reshape(3)
    # dark ink on a light place, light ink on a dark one, each channel on its own
    colour = np.where(behind > 127, rng.integers(0, 60, 3), rng.integers(196, 256, 3))
    picture.paste(Image.new("RGB", (side, side), tuple(int(c) for c in colour)), (left, top), ink)
    amplitude = int(GRAIN * 40)
    grain = rng.integers(-amplitude, amplitude + 1, (height, width, 1), dtype=np.int16)
    return Image.fromarray(np.clip(np.asarray(picture, np.int16) + grain, 0, 255).astype(np.uint8))


def _noise(rng, width, height, cells_x, cells_y):
    """Random colours on a ``cells_x`` x ``cells_y`` grid, smoothly enlarged to ``width`` x ``height``."""
    from PIL import Image

    cells = rng.integers(0, 256, (cells_y, cells_x, 3), dtype=np.uint8)
    return Image.fromarray(cells).resize((width, height), Image.BICUBIC)


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m basetrainer.data.images.photo_digits",
                                     description="Write the photo-like JPEG digits (an ImageFolder tree) to ROOT.")
    parser.add_argument("root", nargs="?", default=os.path.join("data", "photo_digits"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per_class", type=int, default=None, help="at most this many pictures per digit and split")
    parser.add_argument("--size_factor", type=float, default=1.0, help="scales every picture's sides")
    parser.add_argument("--repeats", type=int, default=1, help="each digit drawn that many times (a larger set)")
    parser.add_argument("--processes", type=int, default=1, help="drawn by that many processes")
    return parser


def main(argv=None):
    args = get_parser().parse_args(argv)
    print(write_photo_digits(args.root, seed=args.seed, per_class=args.per_class, size_factor=args.size_factor,
                             repeats=args.repeats, processes=args.processes))


if __name__ == "__main__":
    main()
