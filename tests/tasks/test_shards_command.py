"""``basetrainer shards`` and the classification task on what it writes, as a user types them: an image folder
written as shards, then ``basetrainer train`` with train_data and test_data naming the shards."""
import json
import os

import numpy as np
import pytest
import yaml
from PIL import Image

from basetrainer.data.streaming import image_folder_records, write_shards
from basetrainer.tasks import shards
from support.processes import run_command

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
