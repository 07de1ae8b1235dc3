"""The detection task's data: the generated digit scenes, the COCO reader and its checks, the transforms and the
list collate."""
import hashlib
import json
import os

import numpy as np
import pytest
import torch
from PIL import Image

from basetrainer.errors import DataError
from basetrainer.tasks.detection.coco import CocoDetection, collate_detection, read_instances
from basetrainer.tasks.detection.scenes import write_digit_scenes
from basetrainer.tasks.detection.transforms import build_transform
from basetrainer.utils.batch import batch_size

SMALL = {"train": 6, "val": 3}


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    return write_digit_scenes(tmp_path_factory.mktemp("scenes") / "digit_scenes", split_sizes=SMALL)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_generated_annotations_are_the_same_bytes_on_every_machine(scenes):
    with open(os.path.join(scenes, "train", "instances.json"), "rb") as stream:
        assert sha256(stream.read()) == "fcc34e1faf42dbca3ee2c84186079d372c467f37797f6a7f86228136a8dfeec7"
    with open(os.path.join(scenes, "val", "instances.json"), "rb") as stream:
        assert sha256(stream.read()) == "0ea5dc548e5141a0295c0a6d94839dcfae8d13617e4e814ca03f85dfa3647653"


def test_the_generated_pixels_are_the_same_on_every_machine(scenes):
    # The decoded pixels, not the PNG file: zlib versions compress the same pixels to different bytes.
    pixels = np.asarray(Image.open(os.path.join(scenes, "train", "images", "000005.png")))
    assert sha256(pixels.tobytes()) == "7e09ab627be2c58cb1987219b7c93423f91d97db8d73a1e9564443ae58c9d232"


def test_every_generated_box_holds_ink_and_no_ink_lies_outside_the_boxes(scenes):
    coco = read_instances(os.path.join(scenes, "train", "instances.json"))
    for image in coco["images"]:
        pixels = np.asarray(Image.open(os.path.join(scenes, "train", "images", image["file_name"])))
        covered = np.zeros_like(pixels, dtype=bool)
        for annotation in (a for a in coco["annotations"] if a["image_id"] == image["id"]):
            x, y, width, height = annotation["bbox"]
            assert pixels[y:y + height, x:x + width].any()
            covered[y:y + height, x:x + width] = True
        assert not pixels[~covered].any()


def test_the_scenes_are_written_once_and_then_found(scenes):
    path = os.path.join(scenes, "train", "instances.json")
    written = os.stat(path).st_mtime_ns
    write_digit_scenes(scenes, split_sizes=SMALL)
    assert os.stat(path).st_mtime_ns == written


def test_a_folder_the_generator_did_not_write_is_refused(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(DataError, match="not a digit-scenes data set"):
        write_digit_scenes(tmp_path, split_sizes=SMALL)
    assert (tmp_path / "mine.txt").read_text() == "keep me"


# ---------------------------------------------------------------------------------- the COCO reader
def write_coco(folder, coco, images=("a.png", "b.png"), size=(40, 30)):
    """A COCO data set by hand: ``images`` as grey pictures of ``size``, ``coco`` as instances.json."""
    os.makedirs(folder / "images", exist_ok=True)
    for name in images:
        Image.new("RGB", size, (90, 90, 90)).save(folder / "images" / name)
    (folder / "instances.json").write_text(json.dumps(coco))
    return str(folder / "images"), str(folder / "instances.json")


HAND_WRITTEN = {
    "images": [{"id": 10, "file_name": "a.png", "width": 40, "height": 30},
               {"id": 11, "file_name": "b.png", "width": 40, "height": 30}],
    "annotations": [{"id": 1, "image_id": 10, "category_id": 7, "bbox": [1, 2, 10, 5]},
                    {"id": 2, "image_id": 10, "category_id": 3, "bbox": [20, 10, 4.5, 8]},
                    {"id": 3, "image_id": 11, "category_id": 7, "bbox": [0, 0, 40, 30], "iscrowd": 1}],
    "categories": [{"id": 7, "name": "cat"}, {"id": 3, "name": "dog"}],
}


def test_the_reader_gives_corner_boxes_and_labels_from_one_in_the_order_of_the_category_ids(tmp_path):
    data = CocoDetection(*write_coco(tmp_path, HAND_WRITTEN))
    image, target = data[0]
    assert image.shape == (3, 30, 40)
    assert target["boxes"].tolist() == [[1, 2, 11, 7], [20, 10, 24.5, 18]]
    assert target["labels"].tolist() == [2, 1]
    assert target["image_id"] == 10
    assert (data.categories, data.category_ids, data.num_classes) == (["dog", "cat"], [3, 7], 2)


def test_crowd_annotations_are_left_out(tmp_path):
    _, target = CocoDetection(*write_coco(tmp_path, HAND_WRITTEN))[1]
    assert target["boxes"].shape == (0, 4) and target["labels"].tolist() == []


def broken(change):
    coco = json.loads(json.dumps(HAND_WRITTEN))
    change(coco)
    return coco


BAD_ANNOTATIONS = {
    "missing images": (broken(lambda c: c.pop("images")), "it has no 'images' list"),
    "an image without file_name": (broken(lambda c: c["images"][1].pop("file_name")),
                                   "images[1] has no 'file_name'"),
    "a box of negative width": (broken(lambda c: c["annotations"][0].update(bbox=[1, 2, -10, 5])),
                                "annotations[0]: bbox [1, 2, -10, 5] has a width or height that is not positive"),
    "a box of three numbers": (broken(lambda c: c["annotations"][1].update(bbox=[1, 2, 3])),
                               "annotations[1]: bbox [1, 2, 3] is not [x, y, width, height]"),
    "an image id that does not exist": (broken(lambda c: c["annotations"][0].update(image_id=99)),
                                        "annotations[0]: image_id 99 is no image's id"),
    "a category that does not exist": (broken(lambda c: c["annotations"][1].update(category_id=5)),
                                       "annotations[1]: category_id 5 is no category's id"),
    "an image id given twice": (broken(lambda c: c["images"][1].update(id=10)), "images[1] repeats id 10"),
    "no categories": (broken(lambda c: c.update(categories=[], annotations=[])), "has no categories"),
    "a list, not an object": ([1, 2], "it holds a list"),
}


@pytest.mark.parametrize("coco, message", BAD_ANNOTATIONS.values(), ids=BAD_ANNOTATIONS.keys())
def test_an_annotation_file_that_is_not_coco_is_one_line_naming_the_entry(tmp_path, coco, message):
    with pytest.raises(DataError) as refused:
        CocoDetection(*write_coco(tmp_path, coco), name="train_annotations")
    assert message in str(refused.value)
    assert str(refused.value).startswith("train_annotations: ") and "\n" not in str(refused.value)


def test_an_annotation_file_that_is_not_json_is_one_line(tmp_path):
    images, annotations = write_coco(tmp_path, HAND_WRITTEN)
    with open(annotations, "w") as stream:
        stream.write("{not json")
    with pytest.raises(DataError, match="is not a JSON file"):
        CocoDetection(images, annotations)


def test_a_missing_annotation_file_is_one_line(tmp_path):
    images, _ = write_coco(tmp_path, HAND_WRITTEN)
    with pytest.raises(DataError, match="no such annotation file"):
        CocoDetection(images, str(tmp_path / "nothing.json"))


def test_an_unreadable_image_raises_naming_the_file(tmp_path):
    images, annotations = write_coco(tmp_path, HAND_WRITTEN)
    with open(os.path.join(images, "a.png"), "wb") as stream:
        stream.write(b"not a png")
    with pytest.raises(DataError, match="cannot read image .*a.png"):
        CocoDetection(images, annotations)[0]


def test_an_unreadable_image_is_skipped_for_the_next_one_when_asked(tmp_path):
    images, annotations = write_coco(tmp_path, HAND_WRITTEN)
    with open(os.path.join(images, "a.png"), "wb") as stream:
        stream.write(b"not a png")
    _, target = CocoDetection(images, annotations, on_bad_image="skip")[0]
    assert target["image_id"] == 11


# ---------------------------------------------------------------------------------- transforms and collate
@pytest.mark.parametrize("seed", range(4))
def test_training_transforms_move_the_boxes_with_the_ink(scenes, seed):
    cfg = {"input_size": [64, 64], "scale_jitter": [1.3, 1.3], "hflip": True}
    data = CocoDetection(os.path.join(scenes, "train", "images"), os.path.join(scenes, "train", "instances.json"),
                         transform=build_transform(cfg, train=True))
    torch.manual_seed(seed)
    image, target = data[seed]
    assert image.shape == (3, 64, 64) and image.dtype == torch.float32
    covered = torch.zeros(64, 64, dtype=torch.bool)
    for x1, y1, x2, y2 in target["boxes"].round().int().tolist():
        assert image[0, y1:y2, x1:x2].sum() > 0
        covered[max(y1 - 1, 0):y2 + 1, max(x1 - 1, 0):x2 + 1] = True
    assert image[0][~covered].max() < 0.05  # what the boxes leave out is background (interpolation at the edges)


def test_evaluation_images_keep_their_size_and_boxes(tmp_path):
    data = CocoDetection(*write_coco(tmp_path, HAND_WRITTEN), transform=build_transform({}, train=False))
    image, target = data[0]
    assert image.shape == (3, 30, 40) and float(image.max()) <= 1.0
    assert target["boxes"].tolist() == [[1, 2, 11, 7], [20, 10, 24.5, 18]]


def test_the_collate_gives_two_lists_that_the_engine_counts_as_one_sample_per_image(tmp_path):
    data = CocoDetection(*write_coco(tmp_path, HAND_WRITTEN, size=(40, 30)))
    images, targets = collate_detection([data[0], data[1], data[0]])
    assert isinstance(images, list) and isinstance(targets, list)
    assert [len(target["labels"]) for target in targets] == [2, 0, 2]
    assert batch_size((images, targets)) == 3


def test_a_split_the_scenes_do_not_have_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(DataError, match="the digit scenes have the splits train, val"):
        write_digit_scenes(tmp_path / "scenes", split_sizes={"test": 4})
    assert not (tmp_path / "scenes").exists()
