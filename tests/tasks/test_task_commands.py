"""What ``basetrainer train`` says, through the command a user types, when the data are not where the config says
(the key at fault, before any process starts) and when evaluation is turned off with an empty test set (every task
says so in its data line, and nothing asks for a recorder)."""
import json

import pytest

from basetrainer import cli
from basetrainer.tasks.detection.scenes import write_digit_scenes
from basetrainer.tasks.common.startup import EVALUATION_OFF


def refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    error = capsys.readouterr().err
    assert stop.value.code == 2 and error.count("\n") == 1, error
    return error.strip()


@pytest.fixture
def annotations(tmp_path):
    path = tmp_path / "instances.json"
    path.write_text(json.dumps({"images": [], "annotations": [], "categories": []}), encoding="utf-8")
    return path


def test_a_missing_coco_image_folder_is_named_by_its_key_before_any_process_starts(
        tmp_path, annotations, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    error = refused(["train", "--task", "detection", "--train_images", str(tmp_path / "missing"),
                     "--train_annotations", str(annotations), "--test_images", "", "--work_dir", "work",
                     "--distributed", "--gpu_id", "0", "1"], capsys)
    assert error.startswith(f"error: train_images: no such folder {tmp_path / 'missing'}; point it at the folder")
    assert not (tmp_path / "work").exists()  # no process started, none made the work_dir


def test_a_missing_coco_annotation_file_is_named_by_its_key_before_any_process_starts(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "images").mkdir()
    error = refused(["train", "--task", "detection", "--train_images", "images", "--train_annotations",
                     "missing.json", "--test_images", "", "--work_dir", "work", "--distributed", "--gpu_id", "0",
                     "1"], capsys)
    assert error == ("error: train_annotations: no such annotation file missing.json; give a COCO instances.json")
    assert not (tmp_path / "work").exists()


QUICK = ["max_iters=1", "progress=false", "loggers=[]", "num_workers=0", "--batch_size", "2"]


def task_arguments(task, tmp_path) -> list:
    if task == "classification":
        return ["--input_size", "8", "8", "--test_data", ""]
    if task == "detection":
        scenes = write_digit_scenes(tmp_path / "scenes", split_sizes={"train": 4})
        return ["--task", "detection", "--train_images", f"{scenes}/train/images", "--train_annotations",
                f"{scenes}/train/instances.json", "--test_images", ""]
    pytest.importorskip("transformers")
    return ["--task", "text", "--test_data", "", "max_samples=4", "lora.r=2"]


@pytest.mark.slow
@pytest.mark.parametrize("task", ["classification", "detection", "text"])
def test_an_empty_test_set_makes_every_task_say_that_evaluation_is_off_and_nothing_else(task, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where the bundled data are written
    cli.main(["train", *task_arguments(task, tmp_path), *QUICK, "--work_dir", "work"])
    log = (tmp_path / "work" / "log" / "train.log").read_text(encoding="utf-8")
    [data_line] = [line for line in log.splitlines() if " INFO data: " in line]
    assert f", {EVALUATION_OFF}, " in data_line
    assert " 0 test " not in log and "WARNING" not in log and "recorder" not in log
