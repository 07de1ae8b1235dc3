"""The detection task on COCO shards: the same samples (pixels, boxes, labels, ids) as from the COCO folder they
were written from, the same categories, the same test mAP against the shards' boxes as against the annotation
file, and a clear line when the annotations setting names something else."""
import os

import pytest
import torch
import yaml

from basetrainer.data.streaming import ShardDataset, image_folder_records, write_shards
from basetrainer.data.streaming.sources import ShardMixture
from basetrainer.errors import ConfigError
from basetrainer.tasks.detection.config import parse_config
from basetrainer.tasks.detection.mean_ap import MeanAPRecorder
from basetrainer.tasks.detection.scenes import write_digit_scenes
from basetrainer.tasks.detection.trainer import coco_data
from basetrainer.tasks.shards import coco_records
from support.images import write_class_images


@pytest.fixture(scope="module")
def scenes_and_shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("coco_shards")
    scenes = write_digit_scenes(root / "scenes", split_sizes={"train": 6, "val": 3})
    for split in ("train", "val"):
        records, total, meta = coco_records(f"{scenes}/{split}/images", f"{scenes}/{split}/instances.json")
        write_shards(records, root / "shards" / split, kind="coco", meta=meta, total=total, shard_bytes=4000,
                     progress=False)
    return scenes, root / "shards"


def _config(*flags):
    return parse_config([*map(str, flags), "--work_dir", "unused", "num_workers=0"])


def test_coco_shards_give_the_samples_of_the_folder_they_were_written_from(scenes_and_shards):
    scenes, shards = scenes_and_shards
    folder = coco_data(_config("--test_images", f"{scenes}/val/images", "--test_annotations",
                               f"{scenes}/val/instances.json"), "test")
    streamed = coco_data(_config("--test_images", shards / "val", "--test_annotations", shards / "val"), "test")
    assert isinstance(streamed, ShardDataset) and len(streamed) == len(folder) == 3
    assert (streamed.categories, streamed.category_ids, streamed.image_ids) == \
        (folder.categories, folder.category_ids, folder.image_ids)
    for index in range(3):
        (image, target), (expected_image, expected) = streamed[index], folder[index]
        assert torch.equal(image, expected_image) and torch.equal(target["boxes"], expected["boxes"])
        assert torch.equal(target["labels"], expected["labels"]) and target["image_id"] == expected["image_id"]


def guesses(target):
    """Each box of ``target`` moved 1 pixel right (score 0.9 down), then again under the next label (score 0.3 down)."""
    count = len(target["labels"])
    moved = target["boxes"] + torch.tensor([1.0, 0.0, 1.0, 0.0])
    return {"boxes": torch.cat([moved, moved]), "labels": torch.cat([target["labels"], target["labels"] % 10 + 1]),
            "scores": torch.cat([0.9 - 0.1 * torch.arange(count), 0.3 - 0.01 * torch.arange(count)])}


def test_the_test_map_against_the_shards_boxes_is_the_map_against_the_annotation_file(scenes_and_shards):
    scenes, shards = scenes_and_shards
    folder = coco_data(_config("--test_images", f"{scenes}/val/images", "--test_annotations",
                               f"{scenes}/val/instances.json"), "test")
    streamed = coco_data(_config("--test_images", shards / "val", "--test_annotations", shards / "val"), "test")
    published = []
    for dataset, annotations in ((folder, folder.annotations), (streamed, None)):  # as DetectionTrainer builds it
        recorder, logs = MeanAPRecorder(dataset.categories, dataset.category_ids, annotations), {}
        targets = [dataset[index][1] for index in range(len(dataset))]
        recorder.on_test_begin(logs)
        recorder.on_test_summary((None, targets), [guesses(target) for target in targets], None, 0, 0, logs)
        recorder.on_test_end(logs)
        published.append(logs["test"])
    assert published[0] == published[1] and 0.0 < published[0]["map"] < 1.0


def test_annotations_left_at_their_default_are_read_from_the_shards(scenes_and_shards):
    _, shards = scenes_and_shards
    assert len(coco_data(_config("--train_images", shards / "train"), "train")) == 6


def test_annotations_naming_another_file_beside_shards_are_refused_in_one_line(scenes_and_shards):
    scenes, shards = scenes_and_shards
    with pytest.raises(ConfigError, match=r"^train_annotations: .*but train_images names shards, which hold the boxes"):
        coco_data(_config("--train_images", shards / "train", "--train_annotations",
                          f"{scenes}/train/instances.json"), "train")


def test_image_folder_shards_are_refused_by_the_detection_task(tmp_path):
    records, total, meta = image_folder_records(write_class_images(tmp_path / "images", ["a", "b"], per_class=2))
    write_shards(records, tmp_path / "shards", kind="images", meta=meta, total=total, progress=False)
    with pytest.raises(ConfigError, match=r"holds images shards; the detection task reads COCO shards"):
        coco_data(_config("--train_images", tmp_path / "shards"), "train")
    assert os.path.isdir(tmp_path / "shards")


def test_train_images_as_sources_mixed_by_weight_give_each_source_its_share(scenes_and_shards, tmp_path):
    _, shards = scenes_and_shards
    config = tmp_path / "mixture.yaml"
    config.write_text(yaml.safe_dump({"train_images": [{"path": str(shards / "train"), "weight": 3},
                                                       {"path": str(shards / "val"), "weight": 1}]}))
    mixed = coco_data(_config("-c", config), "train")
    assert isinstance(mixed, ShardMixture) and mixed.kind == "coco" and len(mixed) == 6 + 3
    order = [int(index) for index in mixed.epoch_permutation(seed=0, epoch=0)]
    from_train = sum(index < 6 for index in order)
    assert (len(order), from_train) == (9, 7)  # 3:1 of 9 samples: 6.75 and 2.25, rounded so that they add up
    image, target = mixed[order[0]]
    assert image.shape[0] == 3 and len(target["boxes"]) == len(target["labels"]) > 0
