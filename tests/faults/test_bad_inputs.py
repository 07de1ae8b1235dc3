"""The catalogue of ordinary failures: each ends with one line naming the problem and the fix,
a non-zero exit, and nothing lost (an existing last.pth is never touched).

User-input cases run the example pipeline's entry point as a user would; hangs and failing ranks run
the tiny job (tests/workers/tiny.py) as subprocesses (stop signals and restarts:
tests/faults/test_stop_signals.py).
"""
import hashlib
import logging
import os
import pickle
import shutil
import socket
import time

import numpy as np
import pytest
import torch
from PIL import Image

from basetrainer.tasks import classification
from support import REPO
from support.full_disk import small_filesystem
from support.processes import run_command, run_python

ROOT = str(REPO)
EXAMPLE = os.path.join(ROOT, "examples", "example.py")


def make_image_folder(root, classes=("a", "b"), per_class=6, size=16):
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c, name in enumerate(classes):
            os.makedirs(root / split / name, exist_ok=True)
            for i in range(per_class):
                pixels = rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / name / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny dataset and a work dir that already holds a good last.pth."""
    root = tmp_path_factory.mktemp("ft")
    data = make_image_folder(root / "data")
    work = root / "work"
    result = run_python([EXAMPLE, *base_flags(data, work)], cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    return data, work


def base_flags(data, work, *extra):
    return ["--train_data", str(data / "train"), "--test_data", str(data / "val"), "--input_size", "16", "16",
            "--batch_size", "4", "--num_epochs", "1", "--num_workers", "0", "--no-progress",
            "--work_dir", str(work), *extra]


def digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture
def guarded(trained, tmp_path):
    """A copy of the trained work dir; on exit, asserts its last.pth is byte for byte unchanged."""
    data, work = trained
    copy = tmp_path / "work"
    shutil.copytree(work, copy)
    before = digest(copy / "model" / "last.pth")
    yield data, copy
    assert digest(copy / "model" / "last.pth") == before, "an existing checkpoint was overwritten"
    assert not [p for p in os.listdir(copy / "model") if p.endswith(".tmp")]


def fails(capsys, *argv, code=2):
    """Runs the example's main in this process; returns its single error line."""
    with pytest.raises(SystemExit) as stop:
        classification.main([str(a) for a in argv])
    assert stop.value.code == code
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error: ") and "Traceback" not in "\n".join(err)
    return err[-1]


# ---------------------------------------------------------------------- config
def test_unknown_config_key_suggests_the_closest(guarded, capsys):
    data, work = guarded
    line = fails(capsys, *base_flags(data, work), "lrr=0.1")
    assert line == "error: unknown config key 'lrr' (from the command line): did you mean 'lr'?"


def test_wrong_value_type_names_the_key_and_the_type(guarded, capsys, tmp_path):
    data, work = guarded
    (tmp_path / "c.yaml").write_text("batch_size: many\n")
    line = fails(capsys, "-c", tmp_path / "c.yaml", *base_flags(data, work))
    assert f"config key 'batch_size' expects an integer >= 1, got str 'many' (in {tmp_path / 'c.yaml'} line 1)" in line


def test_yaml_syntax_error_gives_the_line_number(guarded, capsys, tmp_path):
    data, work = guarded
    (tmp_path / "c.yaml").write_text("lr: 0.1\nbatch_size: [4\nseed: 1\n")
    line = fails(capsys, "-c", tmp_path / "c.yaml", *base_flags(data, work))
    assert f"{tmp_path / 'c.yaml'} line 3" in line and "fix the YAML syntax" in line


# ---------------------------------------------------------------------- data
def test_missing_data_folder(guarded, capsys, tmp_path):
    data, work = guarded
    line = fails(capsys, *base_flags(data, work), "--train_data", tmp_path / "nowhere")
    assert line.startswith(f"error: train_data: no such folder {tmp_path / 'nowhere'}; point train_data at")


def test_a_run_that_fails_its_data_checks_leaves_no_work_dir(trained, capsys, tmp_path):
    data, _ = trained
    work = tmp_path / "new_run"
    fails(capsys, *base_flags(data, work), "--train_data", tmp_path / "nowhere")
    assert not work.exists()


def test_empty_data_folder(guarded, capsys, tmp_path):
    data, work = guarded
    (tmp_path / "empty").mkdir()
    line = fails(capsys, *base_flags(data, work), "--train_data", tmp_path / "empty")
    assert str(tmp_path / "empty") in line and "class" in line


def test_a_class_folder_with_no_images(guarded, capsys, tmp_path):
    data, work = guarded
    bad = make_image_folder(tmp_path / "d")
    for f in os.listdir(bad / "train" / "b"):
        os.remove(bad / "train" / "b" / f)
    line = fails(capsys, *base_flags(bad, work))
    assert str(bad / "train" / "b") in line and "no images" in line


def corrupt_copy(tmp_path):
    bad = make_image_folder(tmp_path / "d")
    (bad / "train" / "a" / "0.png").write_bytes(b"\x89PNG\r\n\x1a\n this is not an image")
    return bad


def test_a_corrupt_image_stops_with_its_name_when_on_bad_image_is_raise(guarded, capsys, tmp_path):
    _, work = guarded
    bad = corrupt_copy(tmp_path)
    line = fails(capsys, *base_flags(bad, work), "on_bad_image=raise")
    assert str(bad / "train" / "a" / "0.png") in line


def test_a_corrupt_image_is_skipped_with_a_warning_when_on_bad_image_is_skip(tmp_path):
    bad = corrupt_copy(tmp_path)
    warnings = []
    listener = logging.Handler(logging.WARNING)
    listener.emit = lambda record: warnings.append(record.getMessage())
    logging.getLogger("basetrainer").addHandler(listener)  # the run's set_logger stops propagation to root
    classification.main([*base_flags(bad, tmp_path / "work"), "on_bad_image=skip"])
    assert any("0.png" in message for message in warnings)
    assert os.path.exists(tmp_path / "work" / "model" / "last.pth")


def test_batch_size_larger_than_the_dataset_with_drop_last(guarded, capsys):
    data, work = guarded
    line = fails(capsys, *base_flags(data, work), "--batch_size", "64")
    assert "yields no batch" in line and "lower batch_size" in line


# ---------------------------------------------------------------------- processes and devices
def test_more_gpus_than_present(guarded, capsys, monkeypatch):
    data, work = guarded
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    line = fails(capsys, *base_flags(data, work), "--distributed", "--gpu_id", "0", "1", "2", "3")
    assert line == ("error: asked for 4 GPUs per machine but this machine has 1; "
                    "lower gpu_id / num_gpus_per_machine to at most 1")


def test_a_busy_fixed_port(guarded, capsys):
    data, work = guarded
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = fails(capsys, *base_flags(data, work), "--gpu_id", "0", "1", "--distributed",
                     f"dist_url=tcp://127.0.0.1:{port}")
    assert line == (f"error: port {port} on 127.0.0.1 is already in use (another job?): "
                    f"pass dist_url='auto' or choose a free port")


# ---------------------------------------------------------------------- checkpoints
def test_resume_path_that_does_not_exist(guarded, capsys, tmp_path):
    data, work = guarded
    line = fails(capsys, *base_flags(data, work), "--resume", tmp_path / "gone.pth")
    assert line == f"error: resume: no checkpoint at {tmp_path / 'gone.pth'}; check the path, or use resume: auto"


def test_a_truncated_checkpoint(guarded, capsys, tmp_path):
    data, work = guarded
    cut = tmp_path / "cut.pth"
    cut.write_bytes((work / "model" / "last.pth").read_bytes()[:4000])
    line = fails(capsys, *base_flags(data, work), "--resume", cut)
    assert f"{cut} is truncated or not a checkpoint" in line and "resume from an earlier checkpoint" in line


def test_a_checkpoint_from_another_model_names_the_layers(guarded, capsys, tmp_path):
    data, work = guarded
    other = tmp_path / "other"
    result = run_python([EXAMPLE, *base_flags(data, other), "--net_type", "mobilenet_v2"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    line = fails(capsys, *base_flags(data, work), "--resume", other / "model" / "last.pth")
    assert "was written by another model" in line and "conv1.weight" in line and "same net_type" in line


class Payload:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_a_hostile_pickle_is_refused_and_never_run(guarded, capsys, tmp_path, monkeypatch):
    data, work = guarded
    monkeypatch.chdir(tmp_path)
    hostile = tmp_path / "hostile.pth"
    with open(hostile, "wb") as f:
        pickle.dump({"model": {}, "x": Payload()}, f)
    line = fails(capsys, *base_flags(data, work), "--resume", hostile)
    assert f"refusing to load {hostile}" in line and not (tmp_path / "pwned").exists()


def test_nan_loss_names_epoch_and_batch_and_saves_nothing(guarded, capsys):
    data, work = guarded
    line = fails(capsys, *base_flags(data, work), "--lr", "1e30", "nonfinite_check_every=1", code=3)
    assert "the loss is" in line and "at epoch 1, batch" in line and "lower the learning rate" in line


def test_a_work_dir_that_is_not_writable(trained, capsys, tmp_path):
    data, _ = trained
    blocker = tmp_path / "file"
    blocker.write_text("a file, not a folder")
    line = fails(capsys, *base_flags(data, blocker / "work"))
    assert f"cannot create {blocker / 'work'}" in line and "writable work_dir" in line


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_exit_2_with_the_previous_checkpoint_intact(tmp_path):
    # The quick start's command with 2 processes, its work_dir on a real 150 MB filesystem: last.pth (90 MB: weights
    # and momentum) is saved at step 2; at step 4 its successor does not fit beside it.
    with small_filesystem(tmp_path / "disk", "150m") as disk:
        work = os.path.join(disk, "work")
        failed = run_command(["basetrainer", "train", "--distributed", "--gpu_id", "0", "1", "--work_dir", work,
                              "--input_size", "16", "16", "--batch_size", "16", "--no-progress", "test_data=",
                              "max_iters=4", "checkpoint_every_n_iters=2"], cwd=tmp_path)
        last = os.path.join(work, "model", "last.pth")
        assert failed.returncode == 2, failed.stderr[-3000:]
        assert "Traceback" not in failed.stderr
        assert failed.stderr.strip().splitlines()[-1].startswith(
            f"error: rank 0: could not write checkpoint {last}: No space left on device (it needs about 89.")
        assert failed.stderr.strip().endswith(f"(the previous checkpoint {last} is intact)")
        assert torch.load(last, weights_only=True)["iteration"] == 2
        assert not [name for name in os.listdir(os.path.dirname(last)) if name.endswith(".tmp")]


# ---------------------------------------------------------------------- hangs and failing ranks (stop signals and
# restarts: tests/faults/test_stop_signals.py)
@pytest.mark.slow
def test_a_rank_that_stops_responding_ends_the_job_after_the_timeout_naming_it(tiny, tmp_path):
    started = time.monotonic()
    result = tiny("--procs", 2, "--work-dir", tmp_path, "--hang-on-rank", 1, "--timeout", 5, "--epochs", 50,
                  check=False, timeout=120)
    assert result.returncode == 2
    assert "a collective timed out after 5s: rank(s) [1] stopped responding" in result.stderr.strip().splitlines()[-1]
    assert time.monotonic() - started < 90


@pytest.mark.slow
def test_a_rank_that_raises_never_leaves_the_others_waiting(tiny, tmp_path):
    started = time.monotonic()
    result = tiny("--procs", 2, "--work-dir", tmp_path, "--raise-on-rank", 1, "--epochs", 50, check=False)
    assert result.returncode == 1
    assert "worker rank 1 failed with ValueError: injected failure on rank 1" in result.stderr
    assert "Traceback" in result.stderr  # not a user-input error: the worker's own traceback reaches the user
    assert time.monotonic() - started < 60
