"""``basetrainer study`` end to end: each run in a process of its own, a run that fails is a row and the others go
on, a study stopped half-way continues with the runs left, a study over 2 processes per run, and a study of a
script's own trainer, which has no LogHistory: its table is whole all the same, from what the engine records."""
import csv
import json
import signal
import subprocess

import pytest

from support.images import write_class_images
from support.processes import popen_python, run_python, wait_until

# 2 classes x 16 images of 8x8 for training and for testing; one epoch per run of the smallest torchvision model.
TRAINING = ["--train_data", "data/train", "--test_data", "data/val", "--input_size", "8", "8", "--net_type",
            "shufflenet_v2_x0_5", "--num_epochs", "1", "--no-progress", "loggers=[csv]"]


@pytest.fixture
def images(tmp_path):
    for split in ("train", "val"):
        write_class_images(tmp_path / "data" / split, ["a", "b"], per_class=16, size=8)
    return tmp_path


def study(*flags):
    return ["-m", "basetrainer", "study", "--base-batch-size", "4", "--target-value", "50", "--out", "study", *flags,
            "--", *TRAINING]


def wait_for(path, process, timeout=180):
    wait_until(path.exists, [process], timeout, lambda: f"the study ended before {path} appeared: "
               f"{process.communicate()}" if process.poll() is not None else f"no {path} after {timeout} s")


def rows(folder):
    with open(folder / "study.csv", newline="") as stream:
        return list(csv.DictReader(stream))


def test_a_study_stopped_half_way_keeps_the_rows_it_had_and_runs_the_rest(images):
    # 64 is more than the 32 training images: that run fails at start-up, and the study goes on.
    command = study("--batch-sizes", "4", "64", "8")
    folder = images / "study"
    process = popen_python(command, cwd=images, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(folder / "run_bs8", process)  # runs 4 and 64 are done, their rows written; run 8 has started
    done = {name: (folder / f"run_bs{name}" / "study_row.json").read_bytes() for name in (4, 64)}
    table_before = (folder / "study.csv").read_text().splitlines()
    assert process.poll() is None, process.communicate()
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 75, out + err
    assert "error: the study stopped during the run of batch 8; run the same command again" in err
    assert not (folder / "run_bs8" / "study_row.json").exists()

    again = run_python(command, cwd=images, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "study: run 1/3, batch 4: done before, kept" in again.stdout
    assert "study: run 3/3, batch 8: study/run_bs8 holds a run cut short" in again.stdout
    assert {name: (folder / f"run_bs{name}" / "study_row.json").read_bytes() for name in (4, 64)} == done
    table = (folder / "study.csv").read_text().splitlines()
    assert table[:3] == table_before[:3]  # the header and the rows of the runs done before, byte for byte
    failed, finished = rows(folder)[1:]
    assert failed["status"].startswith("failed (exit 2): ") and "batch_size" in failed["status"]
    assert finished["status"] == "ok" and finished["epochs"] == "1" and float(finished["lr"]) == pytest.approx(0.1)
    assert json.loads((folder / "run_bs8" / "log" / "target.json").read_text())["metric"] == "Acc"
    assert (folder / "study.png").is_file() and "| 8 | 8 | 0.1 |" in (folder / "study.md").read_text()


def test_a_study_over_two_processes_doubles_the_global_batch_and_scales_the_lr(images):
    result = run_python(study("--batch-sizes", "4", "--processes", "2"), cwd=images, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [row] = rows(images / "study")
    assert (row["batch_size"], row["global_batch"], row["status"]) == ("4", "8", "ok")
    assert float(row["lr"]) == pytest.approx(0.1)  # 0.05 x 8 / 4, as the run's own log line says
    assert "lr_scaling linear: lr 0.05 x (4 x 2 processes x 1 accumulated) / 4 = 0.1" in \
        (images / "study" / "run_bs4" / "log" / "train.log").read_text()


# A trainer of a user's own, as the own-task guide writes one: no LogHistory, no config.yaml; a BatchNorm layer.
OWN_TRAINER = """
import sys

import torch
from torch import nn
from torch.utils.data import TensorDataset

from basetrainer import EngineTrainer, launch
from basetrainer.callbacks import LossesRecorder
from basetrainer.config import Config, apply_overrides


def blobs(n, seed):
    x = torch.randn(n, 8, generator=torch.Generator().manual_seed(seed))
    return TensorDataset(x, (x.sum(dim=1) > 0).long())


class OwnTrainer(EngineTrainer):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.build(cfg)

    def build_train_loader(self, cfg):
        return self.build_dataloader(blobs(256, 0), cfg.batch_size, phase="train")

    def build_test_loader(self, cfg):
        return self.build_dataloader(blobs(64, 1), cfg.batch_size, phase="test", shuffle=False)

    def build_model(self, cfg):
        model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
        return self.build_model_parallel(model)

    def build_criterion(self, cfg):
        return nn.CrossEntropyLoss()

    def build_optimizer(self, cfg):
        return torch.optim.SGD(self.model.parameters(), lr=cfg.lr)

    def build_callbacks(self, cfg):
        return [LossesRecorder()]


def main(cfg):
    OwnTrainer(cfg).run()


if __name__ == "__main__":
    cfg = apply_overrides(Config(num_epochs=2, batch_size=32, lr=0.1, progress=False), sys.argv[1:])
    launch(main, 1, args=(cfg,))
"""


def test_a_study_of_a_script_s_trainer_without_log_history_fills_every_column(tmp_path):
    (tmp_path / "train.py").write_text(OWN_TRAINER)
    result = run_python(["-m", "basetrainer", "study", "--batch-sizes", "16", "32", "--base-batch-size", "32",
                         "--target-metric", "loss", "--target-mode", "min", "--target-value", "5", "--script",
                         "train.py", "--out", "study", "--", "num_epochs=2"], cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert not list((tmp_path / "study" / "run_bs16" / "log").glob("history.*"))  # no LogHistory: its files
    for row in rows(tmp_path / "study"):
        assert [key for key, value in row.items() if value == ""] == []  # all 14 columns
        assert row["status"] == "ok" and row["epochs"] == "2" and float(row["samples_per_s"]) > 0
        assert float(row["lr"]) == pytest.approx(0.1 * int(row["global_batch"]) / 32)  # scaled by the rule
        assert float(row["final"]) < 5 and float(row["peak_memory_gib"]) > 0
