"""Writing shards: an image folder, COCO data or any map-style dataset, into litdata's chunks and our manifest.

The records go through litdata's ``BinaryWriter`` into ``<out>.partial-<pid>`` beside ``out``; then the index is
made deterministic (litdata stamps it with the time of writing; here the stamp is a checksum of the shards, which
litdata uses to tell versions of a remote folder apart in its cache), the manifest is written last and the folder
renamed to ``out`` in one step. So the same input gives byte for byte the same shards, with one process or
several (``workers``: :mod:`.records` makes the records in worker processes, this process writes them in order),
and an interrupted conversion leaves only a ``.partial-*`` folder without a manifest, which nothing reads as shards
and the next conversion into ``out`` removes.
"""
import glob
import hashlib
import json
import os
import shutil
import warnings

import torch
from tqdm import tqdm

from ...errors import ConfigError, DataError
from ...utils.file_utils import write_text_atomic
from . import library
from .location import INDEX, MANIFEST
from .manifest import Manifest, manifest_of_folder
from .records import Records, records_in_order

DEFAULT_SHARD_BYTES = 64 * 10**6  # litdata's and MosaicML's usual chunk size: one request, seconds of reading


def write_shards(records, out, kind="dataset", meta=None, shard_bytes=DEFAULT_SHARD_BYTES, total=None,
                 progress=True, workers=1) -> Manifest:
    """Writes ``records`` (an iterable of items, or a map-style dataset: its items in index order) as shards of
    about ``shard_bytes`` into the folder ``out`` and returns their manifest. ``kind`` and ``meta`` (the classes,
    the categories) are what readers learn from the manifest. A folder already at ``out`` is replaced only once
    the new shards are complete. ``workers`` processes make the items of a map-style dataset; the bytes written
    are the same for any number."""
    out = os.path.abspath(os.fspath(out))
    if os.path.exists(out) and not os.path.isfile(os.path.join(out, MANIFEST)) and os.listdir(out):
        raise ConfigError(f"--out {out} is a folder that holds something other than shards; give a new folder")
    if shard_bytes < 1:
        raise ConfigError(f"--shard-size: {shard_bytes} bytes; give a positive size such as 64MB")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"--workers {workers}: give the number of processes making records, 1 or more")
    mapped = hasattr(records, "__getitem__") and hasattr(records, "__len__")
    if not mapped and workers > 1:
        raise ConfigError(f"workers={workers} needs a map-style dataset (__len__ and __getitem__), not an iterable")
    for stale in glob.glob(f"{glob.escape(out)}.partial-*"):  # an earlier conversion that was interrupted
        shutil.rmtree(stale, ignore_errors=True)
    partial = f"{out}.partial-{os.getpid()}"
    total = len(records) if mapped else total
    records = records_in_order(records, workers) if mapped else iter(records)
    try:
        writer = library.binary_writer(partial, shard_bytes)
        count = 0
        with warnings.catch_warnings():  # litdata warns of every chunk that ends one item past shard_bytes
            warnings.filterwarnings("ignore", message="An item was larger than the target chunk size")
            for count, record in enumerate(tqdm(records, total=total, desc=f"shards {os.path.basename(out)}",
                                                unit="sample", disable=not progress), start=1):
                writer.add_item(count - 1, record)
        if count == 0:
            raise DataError(f"nothing to write into {out}: the input holds no samples")
        writer.done()
        writer.merge()
        manifest = manifest_of_folder(partial, kind, meta or {})
        _stamp_index(partial, manifest)
        write_text_atomic(os.path.join(partial, MANIFEST), json.dumps(manifest.to_json(), indent=1, sort_keys=True))
        _swap_into_place(partial, out)
    finally:
        getattr(records, "close", lambda: None)()  # ends the workers, if any, before the partial folder goes
        shutil.rmtree(partial, ignore_errors=True)
    return manifest


def _stamp_index(folder: str, manifest: Manifest) -> None:
    """Rewrites litdata's index with a stamp that is a checksum of the shards instead of the time of writing."""
    path = os.path.join(folder, INDEX)
    index = json.load(open(path))
    index["updated_at"] = str(int(hashlib.sha256(manifest.digest.encode()).hexdigest()[:12], 16))
    write_text_atomic(path, json.dumps(index, sort_keys=True))


def _swap_into_place(partial: str, out: str) -> None:
    old = f"{out}.old-{os.getpid()}"
    if os.path.exists(out):
        os.rename(out, old)
    os.rename(partial, out)
    shutil.rmtree(old, ignore_errors=True)


def image_folder_records(root):
    """``(records, total, meta)`` of an ImageFolder tree (``root/<class>/<image>``): each image's file as it is
    (not decoded: the shards are as small as the images), its label and its path under ``root``."""
    from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset

    root = os.fspath(root)
    if not os.path.isdir(root):
        raise DataError(f"--image-folder: no such folder {root}; give an ImageFolder tree (one sub-folder per class)")
    try:
        classes, class_to_index = find_classes(root)
        samples = make_dataset(root, class_to_index, IMG_EXTENSIONS, allow_empty=True)
    except FileNotFoundError as error:
        raise DataError(f"--image-folder {root}: {error}") from None
    if not samples:
        raise DataError(f"--image-folder {root} holds no images ({' '.join(IMG_EXTENSIONS)}) in class folders")
    # An ImageFolder lists its images class by class; written so, a shard would hold one class and a shuffle
    # window a few. Written in a fixed random order, every shard holds every class (the same order every time).
    order = torch.randperm(len(samples), generator=torch.Generator().manual_seed(0)).tolist()
    records = Records(_image_record, [(*samples[index], root) for index in order])
    return records, len(records), {"classes": classes}


def _image_record(path: str, label: int, root: str) -> dict:
    return {"image": _image_bytes(path), "label": label, "name": os.path.relpath(path, root)}


def _image_bytes(path: str) -> bytes:
    """The file's bytes, once Pillow has checked that they are an image (a bad file is found now, not in training)."""
    from PIL import Image

    from ..folder import image_error_reason

    try:
        with Image.open(path) as image:
            image.verify()
    except Exception as error:  # noqa: BLE001 - Pillow fails on bad files in many ways
        raise DataError(f"cannot read image {path} ({image_error_reason(error)}); fix or remove the file, then "
                        f"convert again") from None
    with open(path, "rb") as file:
        return file.read()


def coco_record(path: str, image_id, boxes: list, name: str) -> dict:
    """The record of one COCO image: its file, its id and its boxes ``[x1, y1, x2, y2, label]`` as JSON."""
    return {"image": _image_bytes(path), "image_id": image_id, "boxes": json.dumps(boxes), "name": name}
