"""A user's detection data in COCO format: a folder of images and an ``instances.json``, read and checked.

::

    data = CocoDetection("data/train/images", "data/train/instances.json",
                         transform=build_transform(cfg, True))
    # image: float (3, H, W) in [0, 1]; target: {"boxes": (N, 4) x1 y1 x2 y2, "labels", "image_id"}
    image, target = data[0]

The annotation file is checked as a whole when the data set is made, before any training: a file that
is not COCO (a missing ``images``, ``annotations`` or ``categories`` list, an entry without its keys,
a box that is not four numbers or has no positive width and height, an annotation whose image or
category does not exist, an image id given twice) is a one-line DataError naming the file, the entry
and the fix. Crowd annotations (``iscrowd: 1``) are left out, as COCO's training recipes leave them.
Categories become labels 1 to ``len(categories)`` in the order of their ids (0 is the background);
``categories`` holds their names in that order. An image that cannot be read is found when it is
loaded, as in the classification task: ``on_bad_image="raise"`` stops naming the file, ``"skip"`` warns
once and returns the next readable image.
"""
import json
import numbers
import os

import torch
from torch.utils.data import Dataset

from ...data.folder import image_error_reason
from ...errors import DataError
from ...utils.log import get_logger

logger = get_logger()

REQUIRED = {"images": ("id", "file_name"), "annotations": ("image_id", "bbox", "category_id"),
            "categories": ("id", "name")}


class CocoDetection(Dataset):
    """The images of ``images`` with their boxes from ``annotations`` (a COCO ``instances.json``), checked (see
    the module docstring). ``transform(image, target)`` is applied to the image (a ``tv_tensors.Image``)
    and its target, whose ``boxes`` are ``tv_tensors.BoundingBoxes``, so that it moves the boxes with the
    pixels (:func:`.transforms.build_transform`). ``name`` is what messages call the data (a config key),
    ``images_name`` what they call the images' folder (``name`` unless given)."""

    def __init__(self, images, annotations, transform=None, on_bad_image="raise", name="data", images_name=None):
        self.root, self.name, self.transform, self.on_bad_image = os.fspath(images), name, transform, on_bad_image
        check_images_folder(self.root, annotations, images_name or name)
        self.annotations = os.fspath(annotations)  # the file itself: the test mAP's ground truth
        coco = read_instances(annotations, name)
        order = sorted(category["id"] for category in coco["categories"])
        label_of = {category_id: label for label, category_id in enumerate(order, start=1)}
        names = {category["id"]: str(category["name"]) for category in coco["categories"]}
        self.categories = [names[category_id] for category_id in order]
        self.category_ids = order  # the COCO category id of each label - 1, for results files
        boxes = {image["id"]: [] for image in coco["images"]}
        for annotation in coco["annotations"]:
            if not annotation.get("iscrowd", 0):
                x, y, width, height = annotation["bbox"]
                boxes[annotation["image_id"]].append((x, y, x + width, y + height, label_of[annotation["category_id"]]))
        self.images = [(image["id"], os.path.join(self.root, image["file_name"]), boxes[image["id"]])
                       for image in coco["images"]]
        if not self.images:
            raise DataError(f"{name}: {annotations} lists no image; add images to its 'images' list")
        self._warned = set()

    @property
    def num_classes(self) -> int:
        return len(self.categories)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        for _ in range(len(self.images)):
            image_id, path, boxes = self.images[index]
            pixels = self._read(path)
            if pixels is not None:
                return self._sample(pixels, image_id, boxes)
            index = (index + 1) % len(self.images)
        raise DataError(f"{self.name}: no image under {self.root} can be read; check the files")

    @property
    def image_ids(self) -> list:
        """Each image's COCO id, in dataset order (what a results file names)."""
        return [image_id for image_id, _, _ in self.images]

    def _sample(self, pixels, image_id, boxes):
        return detection_sample(pixels, image_id, boxes, self.transform)

    def _read(self, path):
        """The image's RGB pixels (uint8 ``(H, W, 3)``); None for an unreadable one under ``on_bad_image: skip``."""
        import numpy as np
        from PIL import Image

        try:
            with Image.open(path) as image:
                return np.asarray(image.convert("RGB")).copy()
        except Exception as error:  # noqa: BLE001 - Pillow fails on bad files in many ways
            reason = image_error_reason(error)
            if self.on_bad_image == "raise":
                raise DataError(f"{self.name}: cannot read image {path} ({reason}); fix or remove the file, or set "
                                f"on_bad_image: skip") from None
            if path not in self._warned:
                self._warned.add(path)
                logger.warning("%s: skipping unreadable image %s (%s)", self.name, path, reason)
            return None


def detection_sample(pixels, image_id, boxes, transform):
    """An image's RGB pixels (uint8 ``(H, W, 3)``) as a float tensor and its target (``boxes`` as
    ``[x1, y1, x2, y2, label]``), transformed together; plain tensors out."""
    from torchvision import tv_tensors

    image = tv_tensors.Image(torch.from_numpy(pixels).permute(2, 0, 1))
    coordinates = torch.tensor([box[:4] for box in boxes], dtype=torch.float32).reshape(-1, 4)
    target = {"boxes": tv_tensors.BoundingBoxes(coordinates, format="XYXY", canvas_size=image.shape[-2:]),
              "labels": torch.tensor([box[4] for box in boxes], dtype=torch.int64), "image_id": image_id}
    if transform is not None:
        image, target = transform(image, target)
    target["boxes"] = target["boxes"].as_subclass(torch.Tensor)
    return image.as_subclass(torch.Tensor), target


class ShardSample:
    """Makes a sample of a COCO shard's record (see :func:`basetrainer.data.streaming.open_shards`), as
    :class:`CocoDetection` makes one of a file: ``(image, target)`` through ``transform``."""

    def __init__(self, transform):
        self.transform = transform

    def __call__(self, record):
        pixels, image_id, boxes = record
        return detection_sample(pixels, image_id, boxes, self.transform)


def check_images_folder(images, annotations, name) -> None:
    """A one-line DataError naming ``name`` (the key of the images' folder) when ``images`` is no folder."""
    if not os.path.isdir(images):
        raise DataError(f"{name}: no such folder {images}; point it at the folder of the images that {annotations} "
                        f"names")


def read_instances(path, name="data") -> dict:
    """The COCO annotation file ``path``, checked (see the module docstring); ``name`` prefixes the errors."""
    try:
        with open(path, encoding="utf-8") as stream:
            coco = json.load(stream)
    except FileNotFoundError:
        raise DataError(f"{name}: no such annotation file {path}; give a COCO instances.json") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise DataError(f"{name}: {path} is not a JSON file ({str(error).splitlines()[0]}); give a COCO "
                        f"instances.json") from None
    if not isinstance(coco, dict):
        raise DataError(f"{name}: {path} is not COCO: it holds a {type(coco).__name__}, not an object with "
                        f"'images', 'annotations' and 'categories'")
    for section, keys in REQUIRED.items():
        entries = coco.get(section)
        if not isinstance(entries, list):
            raise DataError(f"{name}: {path} is not COCO: it has no {section!r} list; a COCO instances.json has "
                            f"'images', 'annotations' and 'categories'")
        for index, entry in enumerate(entries):
            missing = [key for key in keys if not isinstance(entry, dict) or key not in entry]
            if missing:
                raise DataError(f"{name}: {path}: {section}[{index}] has no {missing[0]!r}; each entry of "
                                f"{section!r} needs {', '.join(map(repr, keys))}")
    image_ids = _unique_ids(coco["images"], "images", path, name)
    category_ids = _unique_ids(coco["categories"], "categories", path, name)
    if not category_ids:
        raise DataError(f"{name}: {path} has no categories; list the classes in 'categories'")
    for index, annotation in enumerate(coco["annotations"]):
        _check_annotation(annotation, f"{name}: {path}: annotations[{index}]", image_ids, category_ids)
    return coco


def _unique_ids(entries, section, path, name) -> set:
    seen = set()
    for index, entry in enumerate(entries):
        if entry["id"] in seen:
            raise DataError(f"{name}: {path}: {section}[{index}] repeats id {entry['id']!r}; ids must be unique")
        seen.add(entry["id"])
    return seen


def _check_annotation(annotation, where, image_ids, category_ids) -> None:
    box = annotation["bbox"]
    if not (isinstance(box, list) and len(box) == 4 and all(_is_number(value) for value in box)):
        raise DataError(f"{where}: bbox {box!r} is not [x, y, width, height]; write four numbers")
    if box[2] <= 0 or box[3] <= 0:
        raise DataError(f"{where}: bbox {box!r} has a width or height that is not positive; COCO boxes are "
                        f"[x, y, width, height], not corners")
    if annotation["image_id"] not in image_ids:
        raise DataError(f"{where}: image_id {annotation['image_id']!r} is no image's id; add the image to 'images' "
                        f"or remove the annotation")
    if annotation["category_id"] not in category_ids:
        raise DataError(f"{where}: category_id {annotation['category_id']!r} is no category's id; add it to "
                        f"'categories' or fix the annotation")


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def collate_detection(samples):
    """A batch as detectors take it: ``(images, targets)``, two lists, the images possibly of different sizes
    and each target with its own number of boxes."""
    images, targets = zip(*samples)
    return list(images), list(targets)
