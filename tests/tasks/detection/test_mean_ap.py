"""COCO mAP of a detector's predictions, as the task's recorder publishes it: pycocotools' COCOeval, against the
annotation file when there is one, each image counted once."""
import importlib.util
import json

import pytest
import torch

from basetrainer.errors import ConfigError
from basetrainer.tasks.detection.coco_evaluation import STATS
from basetrainer.tasks.detection.config import parse_config
from basetrainer.tasks.detection.mean_ap import MeanAPRecorder, result_line
from basetrainer.tasks.detection.trainer import train

CLASSES = ["cat", "dog"]


def target(image_id, boxes, labels):
    return {"boxes": torch.tensor(boxes, dtype=torch.float32), "labels": torch.tensor(labels), "image_id": image_id}


def prediction(boxes, scores, labels):
    return {"boxes": torch.tensor(boxes, dtype=torch.float32), "scores": torch.tensor(scores),
            "labels": torch.tensor(labels)}


EMPTY = {"boxes": torch.zeros(0, 4), "scores": torch.zeros(0), "labels": torch.zeros(0, dtype=torch.int64)}
TARGETS = [target(7, [[0, 0, 10, 10], [20, 20, 40, 40]], [1, 2]), target(9, [[5, 5, 25, 25]], [1])]


def evaluate(predictions, targets=TARGETS, recorder=None):
    recorder, logs = recorder or MeanAPRecorder(CLASSES), {"test": {}}
    recorder.on_test_begin(logs)
    recorder.on_test_summary(([None] * len(targets), targets), predictions, None, 0, 0, logs)
    recorder.on_test_end(logs)
    return logs["test"]


def test_exact_boxes_give_an_ap_of_one_for_every_class():
    values = evaluate([prediction([[0, 0, 10, 10], [20, 20, 40, 40]], [0.9, 0.8], [1, 2]),
                       prediction([[5, 5, 25, 25]], [0.7], [1])])
    assert (values["map"], values["map_50"], values["map_75"]) == (1.0, 1.0, 1.0)
    assert values["AP"] == {"cat": pytest.approx(1.0), "dog": pytest.approx(1.0)}


def test_a_box_of_the_wrong_class_costs_that_classs_ap():
    values = evaluate([prediction([[0, 0, 10, 10], [20, 20, 40, 40]], [0.9, 0.8], [1, 1]),
                       prediction([[5, 5, 25, 25]], [0.7], [1])])
    assert values["AP"]["dog"] == 0.0 and values["AP"]["cat"] < 1.0


def test_a_box_off_by_a_third_counts_at_iou_half_only():
    # [0, 0, 10, 10] against [0, 0, 10, 13]: IoU 100/130 = 0.77, a hit at 0.5 and 0.75, not above 0.8
    values = evaluate([prediction([[0, 0, 10, 13], [20, 20, 40, 40]], [0.9, 0.8], [1, 2]),
                       prediction([[5, 5, 25, 25]], [0.7], [1])])
    assert values["map_50"] == 1.0 and values["map_75"] == 1.0 and values["map"] < 1.0


def test_the_six_precisions_of_cocoevals_summary_are_published_minus_one_where_no_box_has_that_size():
    values = evaluate([prediction([[0, 0, 10, 10], [20, 20, 40, 40]], [0.9, 0.8], [1, 2]),
                       prediction([[5, 5, 25, 25]], [0.7], [1])])
    assert STATS == ("map", "map_50", "map_75", "map_small", "map_medium", "map_large")
    assert values["map_small"] == pytest.approx(1.0) and values["map_large"] == -1.0  # no box over 96x96 pixels


def test_a_box_whose_iou_is_exactly_a_threshold_counts_there_as_in_cocoeval():
    # IoU 60/100 = 0.6: a hit at 0.5, 0.55 and 0.6 of the ten thresholds (torchmetrics' float32 0.6000000238 missed it)
    values = evaluate([prediction([[0, 0, 10, 6]], [0.9], [1])], targets=[target(1, [[0, 0, 10, 10]], [1])])
    assert (values["map"], values["map_50"], values["map_75"]) == pytest.approx((0.3, 1.0, 0.0))


def test_a_class_with_no_box_in_the_test_set_has_no_ap_and_its_boxes_cost_nothing():
    recorder = MeanAPRecorder(["cat", "dog", "bird"])
    values = evaluate([prediction([[0, 0, 10, 10], [20, 20, 40, 40], [50, 50, 60, 60]], [0.9, 0.8, 0.95], [1, 2, 3]),
                       prediction([[5, 5, 25, 25]], [0.7], [1])], recorder=recorder)
    assert set(values["AP"]) == {"cat", "dog"} and values["map"] == 1.0


def test_an_image_met_twice_as_a_samplers_padding_counts_once():
    predictions = [prediction([[0, 0, 10, 10]], [0.9], [1]), prediction([[5, 5, 25, 25]], [0.7], [2])]
    once = evaluate(predictions)
    twice = evaluate([*predictions, predictions[0]], targets=[*TARGETS, TARGETS[0]])
    assert twice == once and once["map"] < 1.0


def test_an_image_without_boxes_counts_its_objects_as_missed():
    values = evaluate([prediction([[0, 0, 10, 10], [20, 20, 40, 40]], [0.9, 0.8], [1, 2]), EMPTY])
    assert values["AP"]["dog"] == pytest.approx(1.0) and values["map_50"] < 1.0


def test_no_box_at_all_gives_zero():
    values = evaluate([EMPTY, EMPTY])
    assert (values["map"], values["map_50"]) == (0.0, 0.0) and values["AP"] == {"cat": 0.0, "dog": 0.0}


def annotation_file(path):
    """Image 1: a cat, a crowd of dogs (a region to ignore) and a small dog; image 2: a cat; category ids 3 and 5."""
    boxes = [(1, 3, [0, 0, 10, 10], 0), (1, 5, [20, 20, 30, 30], 1), (1, 5, [60, 0, 8, 8], 0), (2, 3, [5, 5, 20, 20], 0)]
    path.write_text(json.dumps({
        "images": [{"id": 1, "file_name": "a.png"}, {"id": 2, "file_name": "b.png"}],
        "annotations": [{"id": index, "image_id": image, "category_id": category, "bbox": box, "area": box[2] * box[3],
                         "iscrowd": crowd} for index, (image, category, box, crowd) in enumerate(boxes, start=1)],
        "categories": [{"id": 3, "name": "cat"}, {"id": 5, "name": "dog"}]}))
    return path


def test_against_the_annotation_file_a_box_on_a_crowd_region_is_no_false_positive(tmp_path):
    recorder = MeanAPRecorder(CLASSES, category_ids=[3, 5], annotations=annotation_file(tmp_path / "instances.json"))
    targets = [target(1, [[0, 0, 10, 10], [60, 0, 68, 8]], [1, 2]), target(2, [[5, 5, 25, 25]], [1])]
    values = evaluate([prediction([[0, 0, 10, 10], [20, 20, 50, 50], [60, 0, 68, 8]], [0.9, 0.95, 0.8], [1, 2, 2]),
                       prediction([[5, 5, 25, 25]], [0.7], [1])], targets=targets, recorder=recorder)
    assert values["map"] == 1.0 and values["AP"] == {"cat": pytest.approx(1.0), "dog": pytest.approx(1.0)}


def test_the_values_are_cocoevals_of_the_same_results_on_the_annotation_file(tmp_path):
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    path = annotation_file(tmp_path / "instances.json")
    recorder = MeanAPRecorder(CLASSES, category_ids=[3, 5], annotations=path)
    targets = [target(1, [[0, 0, 10, 10], [60, 0, 68, 8]], [1, 2]), target(2, [[5, 5, 25, 25]], [1])]
    values = evaluate([prediction([[1, 0, 11, 9], [22, 20, 52, 50], [58, 1, 68, 9]], [0.6, 0.95, 0.8], [1, 2, 1]),
                       prediction([[4, 6, 25, 22], [0, 0, 9, 9]], [0.7, 0.75], [1, 2])], targets=targets,
                      recorder=recorder)
    results = [{"image_id": 1, "category_id": 3, "bbox": [1, 0, 10, 9], "score": 0.6},
               {"image_id": 1, "category_id": 5, "bbox": [22, 20, 30, 30], "score": 0.95},
               {"image_id": 1, "category_id": 3, "bbox": [58, 1, 10, 8], "score": 0.8},
               {"image_id": 2, "category_id": 3, "bbox": [4, 6, 21, 16], "score": 0.7},
               {"image_id": 2, "category_id": 5, "bbox": [0, 0, 9, 9], "score": 0.75}]
    truth = COCO(str(path))
    evaluation = COCOeval(truth, truth.loadRes(results), "bbox")
    evaluation.evaluate()
    evaluation.accumulate()
    evaluation.summarize()
    assert [values[name] for name in STATS] == pytest.approx(list(evaluation.stats[:6]), abs=1e-6)
    assert 0.0 < values["map"] < 1.0


def test_without_pycocotools_the_recorder_names_the_pip_command(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "pycocotools" else find_spec(name, *args))
    with pytest.raises(ConfigError, match=r"^the detection task's mAP needs pycocotools, which is missing; "
                                          r'pip install "basetrainer\[detection\]"$'):
        MeanAPRecorder(CLASSES)


def test_without_pycocotools_training_with_a_test_set_is_refused_before_any_work(monkeypatch, tmp_path):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "pycocotools" else find_spec(name, *args))
    cfg = parse_config([*(f"--{phase}_{kind}={tmp_path / phase}{suffix}" for phase in ("train", "test")
                          for kind, suffix in (("images", ""), ("annotations", ".json"))),
                        "--work_dir", str(tmp_path / "work")])
    with pytest.raises(ConfigError, match=r'needs pycocotools, which is missing; pip install "basetrainer\[detection\]"'):
        train(cfg)
    assert list(tmp_path.iterdir()) == []


def test_the_recorder_names_what_it_publishes_for_targets_and_best_models():
    assert MeanAPRecorder(CLASSES).publishes() == (*STATS, "AP/cat", "AP/dog")


def test_the_result_line_shows_the_three_means_and_each_class():
    line = result_line({"map": 0.5, "map_50": 0.9, "map_75": 0.4, "AP": {"cat": 0.25, "dog": 0.75}})
    assert line == "mAP 0.500 | mAP@0.5 0.900 | mAP@0.75 0.400 | AP cat: 0.25 dog: 0.75"
