"""The detection task end to end on 16 generated canvases: the losses by name and COCO mAP on 1 and 2 processes,
the logged mAP of a trained model equal to pycocotools' COCOeval of the run's results file and to one process's
evaluation of the same model, an exact resume after a kill and after a stop signal, the COCO results file, and bad
inputs refused in one line with nothing left on disk."""
import json
import os
import pathlib

import pytest

from basetrainer.checkpoint import load_checkpoint
from basetrainer.tasks.detection.coco_evaluation import STATS
from basetrainer.tasks.detection.config import parse_config
from basetrainer.tasks.detection.scenes import write_digit_scenes
from basetrainer.tasks.detection.trainer import DetectionTrainer
from support.compare import load_result, same_weights
from support.processes import run_python

WORKER = pathlib.Path(__file__).resolve().parent.parent / "support" / "workers" / "detection_worker.py"
LOSSES = ("loss", "classification", "bbox_regression", "bbox_ctrness")
# 32 steps of 4 images (2 per process) at a constant lr of 0.02: mAP about 0.05 on the 8 test canvases, right boxes
# ranked among wrong ones, where an evaluation that is not COCO's shows (torchmetrics' float32 IoU and recall
# thresholds gave an mAP@0.5 2.8e-4 lower on this run's predictions).
TRAINED = ("--num_epochs", "8", "--batch_size", "2", "--lr", "0.02", "scheduler=constant", "num_warn_up=0",
           "checkpoint_every_n_iters=0")


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    return pathlib.Path(write_digit_scenes(tmp_path_factory.mktemp("data") / "scenes",
                                           split_sizes={"train": 16, "val": 8}))


def config(scenes, work_dir, *more):
    return ["--train_images", scenes / "train" / "images", "--train_annotations", scenes / "train" / "instances.json",
            "--test_images", scenes / "val" / "images", "--test_annotations", scenes / "val" / "instances.json",
            "--num_epochs", "1", "--batch_size", "4", "--work_dir", work_dir, "num_workers=0", "progress=false",
            "loggers=[csv]", "checkpoint_every_n_iters=1", *more]


@pytest.fixture(scope="module")
def uninterrupted(scenes, tmp_path_factory):
    folder = tmp_path_factory.mktemp("uninterrupted")
    run_python([WORKER, "--out", folder / "w.pt", *config(scenes, folder / "work")], check=True)
    return load_result(folder / "w.pt")


@pytest.fixture(scope="module")
def two_processes(scenes, tmp_path_factory):
    """A run of 2 processes that trains fcos_tiny (``TRAINED``), evaluating the 8 test images after each epoch."""
    work_dir = tmp_path_factory.mktemp("two") / "work"
    result = run_python(["-m", "basetrainer", "train", "--task", "detection", "--distributed", "--gpu_id", "0", "1",
                         *config(scenes, work_dir, *TRAINED)])
    assert result.returncode == 0, result.stderr[-2000:]
    return work_dir


def history(work_dir):
    with open(work_dir / "log" / "history.jsonl", encoding="utf-8") as stream:
        return [json.loads(line) for line in stream]


def test_one_process_records_each_loss_by_name_and_the_test_map(uninterrupted):
    logs = uninterrupted["logs"]
    assert all(name in logs["train"] for name in LOSSES)
    assert {"map", "map_50", "map_75", "AP"} <= set(logs["test"]) and 0.0 <= logs["test"]["map"] <= 1.0


def test_two_processes_record_each_loss_by_name_and_the_test_map(two_processes):
    records = history(two_processes)
    assert [record["epoch"] for record in records] == list(range(1, 9))
    for record in records:
        assert all(name in record["train"] for name in LOSSES)
        assert set(STATS) <= set(record["test"])


def cocoeval(annotations, results) -> list:
    """pycocotools' twelve figures of the results file ``results`` against the annotation file ``annotations``."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    truth = COCO(str(annotations))
    evaluation = COCOeval(truth, truth.loadRes(str(results)), "bbox")
    evaluation.evaluate()
    evaluation.accumulate()
    evaluation.summarize()
    return [float(value) for value in evaluation.stats]


def test_the_logged_map_of_a_trained_model_is_cocoevals_of_the_runs_predictions_file(two_processes, scenes):
    logged = history(two_processes)[-1]["test"]
    coco = cocoeval(scenes / "val" / "instances.json", two_processes / "log" / "predictions.json")
    assert [logged[name] for name in STATS] == pytest.approx(coco[:6], abs=1e-6)  # its six average precisions
    assert logged["map"] > 0.02 and logged["map_50"] > 0.05  # trained: right boxes, ranked among wrong ones


def test_one_process_evaluating_the_same_model_gives_the_map_two_processes_logged(two_processes, scenes, tmp_path):
    model = two_processes / "model" / "model_final.pth"
    trainer = DetectionTrainer(parse_config([*map(str, config(scenes, tmp_path / "work")), f"pretrained={model}",
                                             "loggers=[]"]))
    one_process = trainer.evaluate()
    two = history(two_processes)[-1]["test"]
    assert [one_process[name] for name in STATS] == pytest.approx([two[name] for name in STATS], abs=1e-6)
    assert one_process["AP"] == pytest.approx(two["AP"], abs=1e-6)


def test_the_predictions_are_a_coco_results_file_for_the_test_images(two_processes, scenes):
    from pycocotools.coco import COCO

    truth = COCO(str(scenes / "val" / "instances.json"))
    results = truth.loadRes(str(two_processes / "log" / "predictions.json"))
    assert set(results.getImgIds()) <= set(truth.getImgIds()) and len(results.getAnnIds()) > 0


def test_resume_after_a_kill_ends_bitwise_like_an_uninterrupted_run(scenes, uninterrupted, tmp_path):
    arguments = config(scenes, tmp_path / "work")
    killed = run_python([WORKER, "--out", tmp_path / "w.pt", "--kill-at", "0:1", *arguments])
    assert killed.returncode != 0 and not (tmp_path / "w.pt").exists()
    run_python([WORKER, "--out", tmp_path / "w.pt", *arguments, "--resume", "auto"], check=True)
    resumed = load_result(tmp_path / "w.pt")
    assert same_weights(resumed["weights"], uninterrupted["weights"])
    assert resumed["logs"] == uninterrupted["logs"]


def test_a_stop_signal_mid_epoch_saves_last_pth_exits_75_and_the_resumed_run_ends_bitwise_like_an_uninterrupted_one(
        scenes, uninterrupted, tmp_path):
    arguments = config(scenes, tmp_path / "work", "checkpoint_every_n_iters=0")  # last.pth from the stop alone
    stopped = run_python([WORKER, "--out", tmp_path / "w.pt", "--signal-at", "0:1:SIGTERM", *arguments])
    assert stopped.returncode == 75, stopped.stderr[-2000:]
    assert "stopped by SIGTERM at epoch 1, batch 2" in stopped.stderr and not (tmp_path / "w.pt").exists()
    assert load_checkpoint(str(tmp_path / "work" / "model" / "last.pth"))["iteration"] == 2
    run_python([WORKER, "--out", tmp_path / "w.pt", *arguments, "--resume", "auto"], check=True)
    resumed = load_result(tmp_path / "w.pt")
    assert same_weights(resumed["weights"], uninterrupted["weights"])
    assert resumed["logs"] == uninterrupted["logs"]


def test_a_class_count_that_does_not_match_the_annotations_is_one_line_and_leaves_nothing(scenes, tmp_path):
    result = run_python(["-m", "basetrainer", "train", "--task", "detection",
                         *config(scenes, tmp_path / "work", "num_classes=3")])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: num_classes 3 does not match the 10 categories of {scenes / 'train' / 'instances.json'}; set "
        f"num_classes: null to read it from the data")
    assert not os.path.exists(tmp_path / "work")


def test_predict_from_the_final_model_writes_the_boxes_the_run_wrote(two_processes, scenes, tmp_path):
    from basetrainer.tasks.detection.predict import predict_coco

    count = predict_coco(two_processes / "model" / "model_final.pth", scenes / "val" / "images",
                         scenes / "val" / "instances.json", tmp_path / "results.json", batch_size=8)
    with open(tmp_path / "results.json", encoding="utf-8") as stream:
        predicted = json.load(stream)
    with open(two_processes / "log" / "predictions.json", encoding="utf-8") as stream:
        written = json.load(stream)
    assert count == len(predicted) == len(written)
    key = lambda result: (result["image_id"], result["category_id"], round(result["score"], 4))  # noqa: E731
    for ours, theirs in zip(sorted(predicted, key=key), sorted(written, key=key)):
        assert ours["image_id"] == theirs["image_id"] and ours["category_id"] == theirs["category_id"]
        assert ours["bbox"] == pytest.approx(theirs["bbox"], abs=1e-3) and ours["score"] == pytest.approx(
            theirs["score"], abs=1e-5)
