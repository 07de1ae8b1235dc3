"""``basetrainer shards``: an image folder, COCO data or a map-style dataset of one's own, written as shards.

::

    basetrainer shards --image-folder data/digits/train --out shards/train
    basetrainer shards --coco data/scenes/images data/scenes/instances.json --out shards/scenes
    basetrainer shards --dataset my_project.data:train_set --out shards/mine --shard-size 256MB
    basetrainer shards --image-folder data/imagenet/train --out shards/train --workers 8

The shards are litdata's chunks with our manifest (:mod:`basetrainer.data.streaming`); upload the folder as it is
(``aws s3 sync shards/train s3://bucket/train``) and give its URL as ``train_data`` (``train_images``), or give the
folder itself. Running it again on the same input writes the same bytes; an interrupted run leaves no folder at
``--out`` that looks complete. ``--workers N`` reads and checks the records in N processes while this one writes
them in their order: the shards and the manifest are byte for byte those of one process.
"""
import argparse
import importlib
import importlib.util
import os
import sys

from ..config.flags import ArgumentParser
from ..data.streaming.location import parse_size
from ..data.streaming.records import Records
from ..data.streaming.writer import DEFAULT_SHARD_BYTES, coco_record, image_folder_records, write_shards
from ..errors import BaseTrainerError, ConfigError
from ..utils.console import exit_with


def get_parser(prog=None):
    parser = ArgumentParser(
        prog=prog, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Write data as shards that basetrainer train reads from a folder or from object storage "
                    "(train_data, test_data; the detection task's train_images, test_images): litdata's chunks of "
                    "about --shard-size bytes, and a manifest (shards.json) with each shard's size and SHA-256.",
        epilog="examples:\n"
               "  %(prog)s --image-folder data/digits/train --out shards/train\n"
               "  %(prog)s --coco data/scenes/images data/scenes/instances.json --out shards/scenes\n"
               "  %(prog)s --dataset my_project.data:train_set --out shards/mine --shard-size 256MB\n"
               "  %(prog)s --image-folder data/imagenet/train --out shards/train --workers 8")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--image-folder", metavar="FOLDER",
                        help="an ImageFolder tree (one sub-folder of images per class); each image kept as its file")
    source.add_argument("--coco", nargs=2, metavar=("IMAGES", "ANNOTATIONS"),
                        help="a folder of images and its COCO instances.json; each image with its boxes")
    source.add_argument("--dataset", metavar="MOD:NAME",
                        help="a map-style dataset of one's own: NAME in MODULE (or in a .py file), the dataset or a "
                             "function of no arguments returning it; its items as they are (tensors, arrays, "
                             "numbers, text, bytes, PIL images, and tuples or dicts of them)")
    parser.add_argument("--out", required=True, help="the folder to write (replaced once the new shards are complete)")
    parser.add_argument("--shard-size", default="64MB", help="about how big a shard is (default 64MB)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="processes that read and check the records (default 1); the shards are byte for byte "
                             "the same for any N")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    return parser


def coco_records(images, annotations):
    """``(records, total, meta)`` of a COCO folder: each image with its boxes (crowd ones left out, labels 1 to n in
    the order of the category ids, as the detection task reads them)."""
    if not os.path.isdir(images):
        raise ConfigError(f"--coco: no such folder {images}; give the folder of the images that {annotations} names")
    from .detection.coco import read_instances  # the detection task's reader, loaded for --coco only

    coco = read_instances(annotations, "--coco")
    order = sorted(category["id"] for category in coco["categories"])
    label_of = {category_id: label for label, category_id in enumerate(order, start=1)}
    names = {category["id"]: str(category["name"]) for category in coco["categories"]}
    boxes = {image["id"]: [] for image in coco["images"]}
    for annotation in coco["annotations"]:
        if not annotation.get("iscrowd", 0):
            x, y, width, height = annotation["bbox"]
            boxes[annotation["image_id"]].append([x, y, x + width, y + height, label_of[annotation["category_id"]]])
    meta = {"categories": [names[i] for i in order], "category_ids": order,
            "image_ids": [image["id"] for image in coco["images"]]}
    records = Records(coco_record, [(os.path.join(images, image["file_name"]), image["id"], boxes[image["id"]],
                                     image["file_name"]) for image in coco["images"]])
    return records, len(records), meta


def user_dataset(spec: str):
    """The dataset ``MODULE:NAME`` names (``NAME`` called when it is a function or a class)."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise ConfigError(f"--dataset {spec!r}: write MODULE:NAME, e.g. my_project.data:train_set")
    try:
        if module_name.endswith(".py"):
            spec_ = importlib.util.spec_from_file_location("user_dataset", module_name)
            module = importlib.util.module_from_spec(spec_)
            spec_.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except (ImportError, FileNotFoundError) as error:
        raise ConfigError(f"--dataset {spec!r}: cannot import {module_name} ({error})") from None
    if not hasattr(module, name):
        raise ConfigError(f"--dataset {spec!r}: {module_name} has no {name}")
    dataset = getattr(module, name)
    dataset = dataset() if callable(dataset) and not hasattr(dataset, "__getitem__") else dataset
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        raise ConfigError(f"--dataset {spec!r} is a {type(dataset).__name__}, not a map-style dataset "
                          f"(__len__ and __getitem__)")
    return dataset


def run(args) -> None:
    shard_bytes = parse_size(args.shard_size, "--shard-size") or DEFAULT_SHARD_BYTES
    if args.workers < 1:
        raise ConfigError(f"--workers {args.workers}: give the number of processes that read the records, 1 or more")
    if args.image_folder:
        records, total, meta = image_folder_records(args.image_folder)
        kind = "images"
    elif args.coco:
        records, total, meta = coco_records(*args.coco)
        kind = "coco"
    else:
        records, meta, kind = user_dataset(args.dataset), {}, "dataset"
        total = len(records)
    manifest = write_shards(records, args.out, kind=kind, meta=meta, shard_bytes=shard_bytes, total=total,
                            progress=args.progress, workers=args.workers)
    size = sum(int(shard["bytes"]) for shard in manifest.shards)
    print(f"wrote {manifest.samples} samples in {len(manifest.shards)} shards ({size / 1e6:.1f} MB) to {args.out}")


def main(argv=None, prog=None):
    """Command-line entry point: a ``BaseTrainerError`` becomes one ``error:`` line and its exit code."""
    args = get_parser(prog).parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except BaseTrainerError as error:
        exit_with(error)


if __name__ == "__main__":
    main()
