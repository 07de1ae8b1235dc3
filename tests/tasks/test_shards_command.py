"""``basetrainer shards`` and the classification task on what it writes, as a user types them: an image folder
written as shards, then ``basetrainer train`` with train_data and test_data naming the shards."""
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest
import yaml
from PIL import Image

from basetrainer.data.streaming import image_folder_records, write_shards
from basetrainer.tasks import shards
from basetrainer.tasks.detection.scenes import write_digit_scenes
from support.processes import popen_python, run_command

pytestmark = pytest.mark.slow

CLASSES = ("cat", "dog", "fox")


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """3 classes x 12 training and 4 test images of 16x16, written as shards by the command, then trained on."""
    root = tmp_path_factory.mktemp("shards_command")
    rng = np.random.default_rng(0)
    for split, count in (("train", 12), ("val", 4)):
        for channel, name in enumerate(CLASSES):
            os.makedirs(root / "images" / split / name)
            for i in range(count):
                pixels = rng.integers(0, 60, (16, 16, 3), dtype=np.uint8)
                pixels[..., channel] += 150
                Image.fromarray(pixels).save(root / "images" / split / name / f"{i}.png")
    runs = {"train": run_command(["basetrainer", "shards", "--image-folder", root / "images" / "train", "--out",
                                  root / "shards" / "train", "--shard-size", "4KB", "--no-progress"])}
    records, total, meta = image_folder_records(root / "images" / "val")  # in this process: one command is enough
    write_shards(records, root / "shards" / "val", kind="images", meta=meta, total=total, progress=False)
    runs["train_run"] = run_command(["basetrainer", "train", "--train_data", root / "shards" / "train", "--test_data",
                                     root / "shards" / "val", "--input_size", "16", "16", "--batch_size", "8",
                                     "--num_epochs", "1", "--num_workers", "0", "--no-progress", "--work_dir",
                                     root / "work"])
    (root / "mixture.yaml").write_text(yaml.safe_dump({"train_data": [
        {"path": str(root / "shards" / "train"), "weight": 3}, {"path": str(root / "shards" / "val"), "weight": 1}]}))
    runs["mixture_run"] = run_command(["basetrainer", "train", "-c", root / "mixture.yaml", "--test_data",
                                       root / "shards" / "val", "--input_size", "16", "16", "--batch_size", "8",
                                       "--num_epochs", "1", "--num_workers", "0", "--no-progress", "--work_dir",
                                       root / "mixture"])
    return root, runs


def test_the_command_writes_shards_with_a_manifest_and_says_what_it_wrote(converted):
    root, runs = converted
    assert runs["train"].returncode == 0, runs["train"].stderr[-2000:]
    assert runs["train"].stdout.startswith(f"wrote 36 samples in ")
    manifest = json.load(open(root / "shards" / "train" / "shards.json"))
    assert manifest["kind"] == "images" and manifest["meta"]["classes"] == list(CLASSES) and len(manifest["shards"]) > 3


def test_the_classification_task_trains_and_evaluates_on_shards(converted):
    root, runs = converted
    assert runs["train_run"].returncode == 0, runs["train_run"].stderr[-3000:]
    config = yaml.safe_load(open(root / "work" / "config.yaml"))
    assert config["classes"] == list(CLASSES)
    history = [json.loads(line) for line in open(root / "work" / "log" / "history.jsonl")]
    assert any("test" in entry for entry in history)


def test_a_missing_image_folder_is_one_line_naming_it(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        shards.main(["--image-folder", str(tmp_path / "nowhere"), "--out", str(tmp_path / "s")])
    error = capsys.readouterr().err
    assert exit_.value.code == 2 and error.count("\n") == 1 and "--image-folder: no such folder" in error
    assert not (tmp_path / "s").exists()


def test_the_classification_task_trains_on_sources_mixed_by_weight_and_says_what_each_gave(converted):
    root, runs = converted
    run = runs["mixture_run"]
    assert run.returncode == 0, run.stderr[-3000:]
    said = [line for line in (run.stdout + run.stderr).splitlines() if "epoch 1 mixes" in line]
    assert len(said) == 1, (run.stdout + run.stderr)[-3000:]
    assert "36 samples (75.0%), 1.00 x its 36" in said[0] and "12 samples (25.0%), 1.00 x its 12" in said[0]


def _digests(folder):
    return {name: hashlib.sha256(open(os.path.join(folder, name), "rb").read()).hexdigest()
            for name in sorted(os.listdir(folder))}


def test_two_workers_write_byte_for_byte_the_shards_and_manifest_of_one(converted):
    root, runs = converted
    run = run_command(["basetrainer", "shards", "--image-folder", root / "images" / "train", "--out",
                       root / "shards" / "train_by_2", "--shard-size", "4KB", "--no-progress", "--workers", "2"])
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split(" to ")[0] == runs["train"].stdout.split(" to ")[0]
    assert _digests(root / "shards" / "train_by_2") == _digests(root / "shards" / "train")


def test_coco_data_written_by_two_workers_is_byte_for_byte_that_of_one(tmp_path):
    scenes = write_digit_scenes(tmp_path / "scenes", split_sizes={"train": 40})  # two batches of records
    for workers in ("1", "2"):
        shards.main(["--coco", f"{scenes}/train/images", f"{scenes}/train/instances.json", "--out",
                     str(tmp_path / workers), "--shard-size", "2KB", "--no-progress", "--workers", workers])
    assert "shards.json" in _digests(tmp_path / "1") and len(_digests(tmp_path / "1")) > 4
    assert _digests(tmp_path / "1") == _digests(tmp_path / "2")


@pytest.mark.parametrize("workers", ["0", "-3"])
def test_workers_below_one_is_one_line_before_the_folder_is_listed(tmp_path, capsys, workers):
    with pytest.raises(SystemExit) as exit_:
        shards.main(["--image-folder", str(tmp_path / "nowhere"), "--out", str(tmp_path / "s"), "--workers", workers])
    error = capsys.readouterr().err
    assert exit_.value.code == 2 and error.count("\n") == 1 and f"--workers {workers}: " in error
    assert not (tmp_path / "s").exists()


SLOW_DATASET = """
import time


class Slow:
    def __len__(self):
        return 20000

    def __getitem__(self, index):
        time.sleep(0.002)
        return {"index": index}


train_set = Slow()
"""


def test_ctrl_c_during_a_conversion_by_workers_leaves_no_out_folder_and_no_process(tmp_path):
    (tmp_path / "slow.py").write_text(SLOW_DATASET)
    command = popen_python([shutil.which("basetrainer"), "shards", "--dataset", tmp_path / "slow.py:train_set",
                            "--out", tmp_path / "out", "--workers", "2", "--no-progress"], cwd=tmp_path,
                           start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not any(name.startswith("out.partial-") for name in os.listdir(tmp_path)):
        assert command.poll() is None and time.monotonic() < deadline, command.communicate()
        time.sleep(0.1)
    time.sleep(1)  # the workers are making records
    os.killpg(command.pid, signal.SIGINT)  # what ^C in a terminal does: the whole group gets it
    _, stderr = command.communicate(timeout=60)
    assert command.returncode != 0 and b"KeyboardInterrupt" in stderr
    assert sorted(os.listdir(tmp_path)) == ["slow.py"]
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):  # no worker left behind in the group
        os.killpg(command.pid, 0)
