"""COCO mAP of a detector's predictions, as the task's recorder publishes it."""
import torch

from basetrainer.tasks.detection.mean_ap import MeanAPRecorder, result_line

CLASSES = ["cat", "dog"]


def target(boxes, labels):
    return {"boxes": torch.tensor(boxes, dtype=torch.float32), "labels": torch.tensor(labels)}


def prediction(boxes, scores, labels):
    return {"boxes": torch.tensor(boxes, dtype=torch.float32), "scores": torch.tensor(scores),
            "labels": torch.tensor(labels)}


TARGETS = [target([[0, 0, 10, 10], [20, 20, 40, 40]], [1, 2]), target([[5, 5, 25, 25]], [1])]


def evaluate(predictions):
    recorder, logs = MeanAPRecorder(CLASSES), {"test": {}}
    recorder.on_test_begin(logs)
    recorder.on_test_summary(([None, None], TARGETS), predictions, None, 0, 0, logs)
    recorder.on_test_end(logs)
    return logs["test"]


def test_exact_boxes_give_an_ap_of_one_for_every_class():
    values = evaluate([prediction([[0, 0, 10, 10], [20, 20, 40, 40]], [0.9, 0.8], [1, 2]),
                       prediction([[5, 5, 25, 25]], [0.7], [1])])
    assert (values["map"], values["map_50"], values["map_75"]) == (1.0, 1.0, 1.0)
    assert values["AP"] == {"cat": 1.0, "dog": 1.0}


def test_a_box_of_the_wrong_class_costs_that_classs_ap():
    values = evaluate([prediction([[0, 0, 10, 10], [20, 20, 40, 40]], [0.9, 0.8], [1, 1]),
                       prediction([[5, 5, 25, 25]], [0.7], [1])])
    assert values["AP"]["dog"] == 0.0 and values["AP"]["cat"] < 1.0


def test_a_box_off_by_a_third_counts_at_iou_half_only():
    # [0, 0, 10, 10] against [0, 0, 10, 13]: IoU 100/130 = 0.77, a hit at 0.5 and 0.75, not above 0.8
    values = evaluate([prediction([[0, 0, 10, 13], [20, 20, 40, 40]], [0.9, 0.8], [1, 2]),
                       prediction([[5, 5, 25, 25]], [0.7], [1])])
    assert values["map_50"] == 1.0 and values["map_75"] == 1.0 and values["map"] < 1.0


def test_the_recorder_names_what_it_publishes_for_targets_and_best_models():
    assert MeanAPRecorder(CLASSES).publishes() == ("map", "map_50", "map_75", "AP/cat", "AP/dog")


def test_the_result_line_shows_the_three_means_and_each_class():
    line = result_line({"map": 0.5, "map_50": 0.9, "map_75": 0.4, "AP": {"cat": 0.25, "dog": 0.75}})
    assert line == "mAP 0.500 | mAP@0.5 0.900 | mAP@0.75 0.400 | AP cat: 0.25 dog: 0.75"
