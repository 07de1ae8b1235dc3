"""Property-based fuzzing of the entry points themselves, in this process: `basetrainer train`, `predict` and
`export` and a user's trainer built on a plain argparse.Namespace. Each generated case either starts a run,
which stops after its first optimizer step (max_iters: 1, on a few tiny images), or is refused with one
line and a non-zero exit; never a traceback, and a refused case leaves no work dir and no file behind.
The configuration alone is fuzzed far more widely, without training, in tests/config/test_config_fuzz.py."""
import argparse
import contextlib
import io
import os
import shutil

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from PIL import Image
from torch import nn
from torch.utils.data import TensorDataset

from basetrainer import cli
from basetrainer.engine.settings import LOOP_SETTINGS
from basetrainer.engine.trainer import EngineTrainer
from basetrainer.errors import BaseTrainerError
from basetrainer.tasks import classification
from basetrainer.tasks.classification.settings import TASK_SETTINGS
from support.hostile import Payload

RUNS = settings(max_examples=30, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
# 15 cases for export (about half of them export; 7 of 16 drawn here), 30 for the other entry points: an ONNX
# export takes about 4 s where another case takes well under 1 s, and the suite has 10 minutes.
EXPORTS = settings(RUNS, max_examples=15)
NET = "resnet18"  # builds, steps and saves in well under a second, and exports to ONNX in 4 s (mobilenet_v3: 13 s)


def make_image_folder(root, per_class=4, size=16):
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for name in ("a", "b"):
            os.makedirs(root / split / name, exist_ok=True)
            for index in range(per_class):
                pixels = rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / name / f"{index}.png")
    return root


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """Tiny data, a finished run's model files, and a pool of hostile files and folders."""
    root = tmp_path_factory.mktemp("fuzz")
    data = make_image_folder(root / "data")
    run = root / "run"
    with contextlib.redirect_stderr(io.StringIO()):
        classification.main(base_argv(data, run))
    hostile = root / "hostile"
    (hostile / "empty").mkdir(parents=True)
    (hostile / "bad_images" / "a").mkdir(parents=True)
    (hostile / "bad_images" / "a" / "x.png").write_text("not an image")
    (hostile / "garbage.pth").write_bytes(os.urandom(2000))
    (hostile / "text.yaml").write_text("lr: yes\n")
    (hostile / "truncated.pth").write_bytes((run / "model" / "last.pth").read_bytes()[:4000])
    torch.save({"model": Payload(str(root / "PWNED"))}, hostile / "payload.pth")
    return root


def base_argv(data, work_dir):
    return ["--train_data", str(data / "train"), "--test_data", str(data / "val"), "--input_size", "16", "16",
            "--batch_size", "4", "--max_iters", "1", "--net_type", NET, "--no-progress", "--work_dir", str(work_dir),
            "loggers=[csv]"]


def hostile_paths(place):
    """Paths a user might hand over by mistake: missing, a folder, garbage, a truncated checkpoint, a pickle that
    runs code, a folder of images that are not, a file where a folder belongs, empty, far too long."""
    hostile = place / "hostile"
    return [str(p) for p in (place / "missing.pth", hostile / "empty", hostile / "garbage.pth", hostile / "text.yaml",
                             hostile / "truncated.pth", hostile / "payload.pth", hostile / "bad_images",
                             hostile / "garbage.pth" / "below")] + ["", "auto", "x" * 300]


def paths(place):
    return hostile_paths(place) + [str(p) for p in (place / "run" / "model" / "last.pth",
                                                    place / "run" / "model" / "model_final.pth", place / "data" / "val")]


def mostly(good, bad):
    """``good`` two times in three, ``bad`` otherwise."""
    return st.one_of(st.sampled_from(good), st.sampled_from(good), st.sampled_from(bad))


def entry_point_outcome(call):
    """Runs ``call()``: ``(0, "")`` when it returns, else its exit code and the last line of stderr. Any exception
    other than SystemExit, and any traceback printed, fails the test."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            call()
            code = 0
        except SystemExit as stop:
            code = stop.code
    text = stderr.getvalue()
    assert "Traceback" not in text, text[-3000:]
    lines = [line for line in text.splitlines() if line.startswith("error: ")]
    if code:
        assert len(lines) == 1 and text.rstrip().endswith(lines[0]), text[-3000:]
    return code, lines[0] if lines else ""


RUNNABLE = ["lr", "momentum", "weight_decay", "optim_type", "loss_type", "scheduler", "milestones", "num_warn_up",
            "amp", "clip_grad_norm", "channels_last", "nonfinite_loss", "seed", "crop_ratio", "hflip", "rgb_mean",
            "rgb_std", "on_bad_image", "input_size", "ema_decay", "early_stopping_patience", "save_best_k",
            "checkpoint_every_n_iters", "log_freq", "eval_every_n_iters", "deterministic", "net_type", "resume",
            "finetune", "train_data", "test_data", "accumulate_grad_batches", "max_iters", "num_epochs", "gpu_id",
            "strict", "batch_size", "work_dir"]
HOSTILE = st.one_of(st.none(), st.booleans(), st.sampled_from([0, -1, 2 ** 63, 1e300, float("nan"), "", "yes", "🙂"]),
                    st.lists(st.integers(-2, 3), max_size=4))


def small_values(name, place):
    """Values in and around what ``name`` accepts, kept small enough that a run stays one step on tiny images."""
    setting = TASK_SETTINGS[name]
    special = {"input_size": st.lists(st.integers(1, 40), min_size=1, max_size=3),
               "net_type": st.sampled_from([NET, "resnet18", "alexnet", "vit_b_16", "squeezenet1_0", "nope"]),
               "batch_size": st.integers(0, 12), "accumulate_grad_batches": st.integers(0, 3),
               "max_iters": st.integers(0, 2), "num_epochs": st.sampled_from([None, 1, 0]),
               "gpu_id": st.sampled_from([[0], [-1], [], [0, 1], "x"]), "milestones": st.lists(st.integers(-1, 3)),
               "lr": st.sampled_from([0.05, 0.0, -1.0, 1e30]), "seed": st.sampled_from([0, 7, -1, 2 ** 32])}
    if name in special:
        return special[name]
    if name == "work_dir":  # beside the one base_argv names: unwritable, empty, under a file, or another good one
        return st.sampled_from([str(place / "hostile" / "garbage.pth" / "work"), "", "/proc/work", "elsewhere"])
    if name in ("resume", "finetune", "train_data", "test_data"):
        return mostly(paths(place)[-3:], hostile_paths(place))
    if isinstance(setting.default, bool):
        return st.booleans() | HOSTILE
    return st.sampled_from([setting.default]) | HOSTILE | st.sampled_from(
        [v for v in (0, 1, 0.5, 3, "raise", "skip", "bf16", "fp16", "warn", "multi-step", "adam", "focal") if v is not None])


def yaml_value(value) -> str:
    import yaml
    return yaml.safe_dump(value, default_flow_style=True, width=10 ** 6).strip().removesuffix("...").strip()


@RUNS
@given(data=st.data())
def test_train_command_lines_start_a_run_or_are_refused_in_one_line(place, tmp_path_factory, monkeypatch, data):
    keys = data.draw(st.lists(st.sampled_from(RUNNABLE), min_size=1, max_size=3, unique=True))
    overrides = [f"{key}={yaml_value(data.draw(small_values(key, place), label=key))}" for key in keys]
    cwd = tmp_path_factory.mktemp("cwd")
    monkeypatch.chdir(cwd)
    work_dir = cwd / "work"
    code, line = entry_point_outcome(lambda: cli.main(["train", *base_argv(place / "data", work_dir), *overrides]))
    if code:
        event("refused")
        assert os.listdir(cwd) == [], f"{line} left {os.listdir(cwd)}"
    else:
        event("ran")
        assert (work_dir / "config.yaml").is_file() or (cwd / "elsewhere" / "config.yaml").is_file()
    assert not (place / "PWNED").exists()


class UserTrainer(EngineTrainer):
    """A user's own trainer, reading its own keys from a plain argparse.Namespace as old scripts do."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.build(cfg)

    def build_train_loader(self, cfg):
        g = torch.Generator().manual_seed(0)
        return self.build_dataloader(TensorDataset(torch.randn(32, 4, generator=g), torch.randint(0, 2, (32,), generator=g)),
                                     cfg.batch_size, 0)

    def build_test_loader(self, cfg):
        return None

    def build_model(self, cfg):
        return self.build_model_parallel(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)))

    def build_criterion(self, cfg):
        return nn.CrossEntropyLoss()

    def build_optimizer(self, cfg):
        return torch.optim.SGD(self.model.parameters(), lr=cfg.lr)

    def build_callbacks(self, cfg):
        return []


LOOP_RUNNABLE = [name for name in LOOP_SETTINGS.names() if name not in ("compile", "profile", "profile_steps")]


@RUNS
@given(data=st.data())
def test_a_user_trainer_on_a_plain_namespace_starts_or_is_refused_in_one_line(place, tmp_path_factory, monkeypatch,
                                                                              data):
    cwd = tmp_path_factory.mktemp("cwd")
    monkeypatch.chdir(cwd)
    keys = data.draw(st.lists(st.sampled_from(LOOP_RUNNABLE), min_size=1, max_size=4, unique=True))
    values = {key: data.draw(small_values(key, place) if key in RUNNABLE else
                             st.sampled_from([LOOP_SETTINGS[key].default]) | HOSTILE, label=key) for key in keys}
    cfg = argparse.Namespace(**{"num_epochs": 1, "progress": False, "batch_size": 8, "lr": 0.1, "work_dir": None,
                                **values})
    try:
        trainer = UserTrainer(cfg)
    except BaseTrainerError as error:
        event("refused")
        assert "\n" not in str(error) and os.listdir(cwd) == []
        return
    try:
        trainer.run()
        event("ran")
    except BaseTrainerError as error:  # e.g. resume from a file that holds no checkpoint
        event("refused when the run starts")
        assert "\n" not in str(error)


def cli_tokens(flags):
    numbers = st.sampled_from(["1", "3", "0", "-1", "64", "65", "4097", "x", "1e3", "", "99999999999999999999999"])
    hostile = st.sampled_from([["--gpu_id", "0"], ["--nope"], ["extra"], ["--format", "nope"]])
    groups = st.lists(st.one_of(st.sampled_from(flags).flatmap(lambda flag: numbers.map(lambda n: [flag, n])), hostile),
                      max_size=2)
    return st.one_of(st.just([]), st.just([]), groups).map(lambda chosen: [token for group in chosen for token in group])


@RUNS
@given(data=st.data())
def test_predict_writes_its_csv_or_is_refused_in_one_line(place, tmp_path_factory, data):
    out_dir = tmp_path_factory.mktemp("out")
    (out_dir / "existing.csv").write_text("keep me")
    models = [str(place / "run" / "model" / name) for name in ("last.pth", "model_final.pth")]
    checkpoint = data.draw(mostly(models, hostile_paths(place)), label="checkpoint")
    images = data.draw(mostly([str(place / "data" / "val"), str(place / "data" / "train")], hostile_paths(place)),
                       label="data")
    out = data.draw(mostly([str(out_dir / "p.csv"), str(out_dir / "sub" / "p.csv")],
                           [str(out_dir / "existing.csv"), str(out_dir), "", str(out_dir / ("x" * 300)),
                            str(place / "hostile" / "garbage.pth" / "p.csv")]), label="out")
    extra = data.draw(cli_tokens(["--topk", "--batch_size", "--gpu_id"]))
    code, line = entry_point_outcome(lambda: cli.main(["predict", "--checkpoint", checkpoint, "--data", images,
                                                       "--out", out, *extra]))
    written = sorted(os.listdir(out_dir))
    if code:
        event("refused")
        assert written == ["existing.csv"] and (out_dir / "existing.csv").read_text() == "keep me", line
    elif out != str(out_dir / "existing.csv"):
        event("predicted")
        assert os.path.isfile(out)
    assert not (place / "PWNED").exists()


@EXPORTS
@given(data=st.data())
def test_export_writes_its_file_or_is_refused_in_one_line(place, tmp_path_factory, data):
    out_dir = tmp_path_factory.mktemp("out")
    models = [str(place / "run" / "model" / name) for name in ("last.pth", "model_final.pth")]
    checkpoint = data.draw(mostly(models, hostile_paths(place)), label="checkpoint")
    name = data.draw(mostly(["w.pth", "m.ts"], ["m.onnx", "m", "", "x" * 300]), label="out")
    fmt = data.draw(mostly([[], ["--format", "pth"], ["--format", "torchscript"]], [["--format", "onnx"], ["--format"]]))
    extra = data.draw(cli_tokens(["--batch"]))
    out = str(out_dir / name) if name else ""
    code, line = entry_point_outcome(lambda: cli.main(["export", checkpoint, "--out", out, *fmt, *extra]))
    if code:
        event("refused")
        leftovers = [p for p in os.listdir(out_dir) if not p.startswith(os.path.basename(out) or "\0")]
        assert leftovers == [], (line, leftovers)
        assert code == 1 or not os.path.exists(out) or os.path.isdir(out), line
    else:
        event("exported")
        assert os.path.isfile(out)
    shutil.rmtree(out_dir)
    assert not (place / "PWNED").exists()
