"""A script written as the earlier library's example taught (``old_style_script.py``) runs unchanged, in 1 and 2 processes."""
import csv
import os

import pytest
import torch

from basetrainer.data import write_digits_imagefolder
from support.processes import free_port, run_python

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "old_style_script.py")


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    root = tmp_path_factory.mktemp("digits")
    write_digits_imagefolder(str(root))
    return root


def run_script(digits, work_dir, *flags):
    result = run_python([SCRIPT, "--train_data", digits / "train", "--test_data", digits / "val",
                         "--work_dir", work_dir, "--dist_url", f"tcp://127.0.0.1:{free_port()}", *flags])
    assert result.returncode == 0, result.stderr[-3000:]
    return work_dir


@pytest.fixture(scope="module")
def one_process(digits, tmp_path_factory):
    return run_script(digits, tmp_path_factory.mktemp("one_process"))


@pytest.fixture(scope="module")
def two_processes(digits, tmp_path_factory):
    return run_script(digits, tmp_path_factory.mktemp("two_processes"), "--distributed", "--gpu_id", "0", "1")


def history(work_dir):
    with open(work_dir / "log" / "history.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
@pytest.mark.parametrize("run, world_size", [("one_process", 1), ("two_processes", 2)])
def test_old_style_script_trains_one_epoch_and_saves_its_checkpoints(run, world_size, request):
    work_dir = request.getfixturevalue(run)
    last = torch.load(work_dir / "model" / "last.pth", weights_only=True)
    assert last["world_size"] == world_size and last["epoch"] == 1
    assert (work_dir / "model" / "model_final.pth").is_file()
    assert len(list(work_dir.glob("model/best_model_*.pth"))) == 1
    rows = history(work_dir)
    assert len(rows) == 1 and float(rows[0]["train_Accuracy"]) > 0 and rows[0]["test_Accuracy"]


@pytest.mark.slow
@pytest.mark.parametrize("run", ["one_process", "two_processes"])
def test_old_style_script_finds_a_config_file_to_copy_without_one_given(run, request):
    """parser_config with no config file writes the config and names it in cfg.config_file, so that
    file_utils.copy_file_to_dir(cfg.config_file, cfg.work_dir) copies it."""
    work_dir = request.getfixturevalue(run)
    assert (work_dir / "args_config.yaml").is_file() and (work_dir / "setup_config.yaml").is_file()
