"""examples/example.py and its pipeline (basetrainer.tasks.classification).

Config precedence and errors; one-epoch runs end to end on a tiny generated ImageFolder
(one process and two CPU processes as subprocesses; resume, fine-tuning and pruning in
this process, which has torchvision imported already); examples/custom_trainer.py.
"""
import csv
import glob
import logging
import os
import re
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from basetrainer.config import load_config
from basetrainer.errors import ConfigError, DataError, one_line
from basetrainer.tasks import classification
from support import REPO
from support.processes import run_python

ROOT = str(REPO)
EXAMPLE = os.path.join(ROOT, "examples", "example.py")
CUSTOM = os.path.join(ROOT, "examples", "custom_trainer.py")
CONFIG = os.path.join(ROOT, "configs", "config.yaml")
CLASSES = ("cat", "dog", "fox")


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    """3 classes x 12 training and 4 test images of 16x16, each class tinted by one channel."""
    root = tmp_path_factory.mktemp("tiny")
    rng = np.random.default_rng(0)
    for split, count in (("train", 12), ("val", 4)):
        for channel, name in enumerate(CLASSES):
            os.makedirs(root / split / name)
            for i in range(count):
                pixels = rng.integers(0, 60, (16, 16, 3), dtype=np.uint8)
                pixels[..., channel] += 150
                Image.fromarray(pixels).save(root / split / name / f"{i}.png")
    return root


def flags(data, work_dir, *extra):
    return ["--train_data", str(data / "train"), "--test_data", str(data / "val"), "--input_size", "16", "16",
            "--batch_size", "8", "--num_epochs", "1", "--num_workers", "0", "--no-progress",
            "--work_dir", str(work_dir), *extra]


def run_example(args, cwd, env=None):
    result = run_python([EXAMPLE, *args], cwd=cwd, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def train_here(*argv):
    """main() in this process (a second run costs no interpreter start)."""
    classification.main([str(a) for a in argv])


def history(work_dir):
    with open(os.path.join(work_dir, "log", "history.csv")) as stream:
        return list(csv.DictReader(stream))


def train_log(work_dir):
    with open(os.path.join(work_dir, "log", "train.log")) as stream:
        return stream.read()


@pytest.fixture(scope="module")
def one_process_run(tiny_data, tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("run") / "work"
    run_example(flags(tiny_data, work_dir, "num_workers=auto"), cwd=tmp_path_factory.mktemp("cwd"))
    return work_dir


@pytest.fixture(scope="module")
def two_process_run(tiny_data, tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("dist") / "work"
    # CPU processes even where there is a GPU: the gloo path, and no need for two GPUs.
    result = run_example(flags(tiny_data, work_dir, "--distributed", "--gpu_id", "0", "1"),
                         cwd=tmp_path_factory.mktemp("cwd"), env={"CUDA_VISIBLE_DEVICES": ""})
    return work_dir, result


def parse(*argv):
    return classification.parse_config([str(a) for a in argv])


def write_yaml(folder, text):
    path = folder / "config.yaml"
    path.write_text(text)
    return str(path)


# ---------------------------------------------------------------------- config


def test_flag_beats_yaml_beats_default(tmp_path):
    path = write_yaml(tmp_path, "lr: 0.2\nbatch_size: 16\n")
    cfg = parse("-c", path, "--lr", "0.3")
    assert (cfg.lr, cfg.batch_size, cfg.num_epochs) == (0.3, 16, 12)


def test_key_value_override_beats_flag_and_yaml(tmp_path):
    path = write_yaml(tmp_path, "lr: 0.2\nuse_prune: true\nmilestones: [2, 4]\n")
    cfg = parse("-c", path, "--lr", "0.3", "lr=0.4", "use_prune=false", "milestones=[5,7]")
    assert (cfg.lr, cfg.use_prune, cfg.milestones) == (0.4, False, [5, 7])


def test_list_flags_take_opts_after_them():
    cfg = parse("--gpu_id", "0", "1", "--opts", "input_size=[24,24]", "amp=bf16")
    assert (cfg.gpu_id, cfg.input_size, cfg.amp) == ([0, 1], [24, 24], "bf16")


def test_overrides_may_come_before_between_and_after_flags():
    cfg = parse("lr=0.01", "--num_epochs", "3", "seed=5", "--no-progress", "amp=bf16")
    assert (cfg.lr, cfg.num_epochs, cfg.seed, cfg.progress, cfg.amp) == (0.01, 3, 5, False, "bf16")


def test_amp_flag_takes_no_value_so_overrides_may_follow():
    cfg = parse("--amp", "lr=0.1")
    assert (cfg.amp, cfg.lr) == ("true", 0.1)


def test_dotted_override_into_a_plain_key_is_refused():
    with pytest.raises(ConfigError, match="config key 'lr' expects a number > 0"):
        parse("lr.value=0.1")


def test_input_size_needs_width_and_height(tmp_path):
    with pytest.raises(ConfigError, match=r"config key 'input_size' expects a list of 2 integers in \[1, 4096\] "
                                          r"\[width, height\] or null, got list \[32\]"):
        parse("-c", write_yaml(tmp_path, "input_size: [32]\n"))


def test_unknown_yaml_key_suggests_the_right_one(tmp_path):
    path = write_yaml(tmp_path, "num_epoch: 3\n")
    with pytest.raises(ConfigError, match=r"unknown config key 'num_epoch' \(in .*\): did you mean 'num_epochs'\?"):
        parse("-c", path)


def test_wrong_type_names_the_key_and_the_expected_type(tmp_path):
    path = write_yaml(tmp_path, "batch_size: big\n")
    with pytest.raises(ConfigError, match="config key 'batch_size' expects an integer >= 1, got str 'big'"):
        parse("-c", path)


def test_unknown_override_is_one_line_and_exit_code_2(tmp_path):
    result = run_python([EXAMPLE, "lrr=0.1"], cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == "error: unknown config key 'lrr' (from the command line): did you mean 'lr'?"
    assert not os.path.exists(tmp_path / "data")  # stopped before writing anything


def test_missing_user_data_folder_is_one_line_and_exit_code_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        train_here("--train_data", tmp_path / "nowhere", "--work_dir", tmp_path / "work")
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: train_data: no such folder {tmp_path / 'nowhere'}; point train_data at an ImageFolder tree "
        f"(one sub-folder per class)")


def test_errors_reraised_by_loader_workers_and_launch_print_their_original_line():
    from torch.utils.data._utils import worker

    try:
        raise DataError("train_data: cannot read image a/b.png (truncated); fix or remove the file")
    except DataError:
        wrapped = worker.ExceptionWrapper(where="in DataLoader worker process 0")
    with pytest.raises(DataError) as reraised:
        wrapped.reraise()
    assert "\n" in str(reraised.value)
    assert one_line(reraised.value) == (
        "train_data: cannot read image a/b.png (truncated); fix or remove the file")
    from_rank = DataError(f"rank 1: {reraised.value}")
    assert one_line(from_rank).startswith("rank 1: train_data: cannot read image a/b.png")


def test_default_data_folders_are_filled_with_the_digits_when_missing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    classification.prepare_data(parse())
    assert sorted(os.listdir("data/digits/train")) == sorted(os.listdir("data/digits/val")) == list("0123456789")


def test_user_data_folders_are_never_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    classification.prepare_data(parse("--train_data", "mine/train", "--test_data", "mine/val"))
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------- one epoch, end to end


def assert_promised_files(work_dir):
    for name in ("model/last.pth", "model/model_final.pth", "log/train.log", "log/history.csv", "config.yaml"):
        assert os.path.isfile(work_dir / name), name
    assert len(glob.glob(str(work_dir / "model" / "best_model_001_*.pth"))) == 1
    assert glob.glob(str(work_dir / "log" / "events.out.tfevents.*"))
    [row] = history(work_dir)
    assert float(row["train_loss"]) > 0 and 0 <= float(row["test_Acc"]) <= 100


def test_one_epoch_writes_checkpoints_logs_and_config(one_process_run):
    assert_promised_files(one_process_run)


def test_the_start_up_line_says_how_many_loader_workers_auto_chose_and_why(one_process_run):
    start_up = re.search(r"\d+ classes \| (\d+) loader workers per process \(auto: ([^)]*)\)", train_log(one_process_run))
    assert start_up is not None
    if "on the CPU" in start_up[2]:
        assert start_up[1] == "0" and start_up[2].endswith("workers would compete with them")


def test_the_last_line_is_the_runs_rate_over_the_whole_run(one_process_run):
    last = train_log(one_process_run).splitlines()[-1]
    assert re.search(r"trained 32 samples in 0:\d\d:\d\d \| samples/s \d+ over the whole run", last)


def test_evaluation_runs_on_test_data(one_process_run):
    assert "test Acc" in train_log(one_process_run) and "on 12 samples" in train_log(one_process_run)


def test_saved_config_holds_the_classes_and_is_accepted_as_a_config_file(one_process_run):
    saved = load_config(one_process_run / "config.yaml")
    assert (saved.num_classes, saved.classes, saved.input_size) == (3, list(CLASSES), [16, 16])
    assert parse("-c", one_process_run / "config.yaml").batch_size == 8


def test_two_cpu_processes_train_and_count_every_test_image_once(two_process_run):
    work_dir, result = two_process_run
    assert "running 2 CPU processes with the gloo backend" in result.stderr
    log = train_log(work_dir)
    assert "x 2 process(es)" in log and "on 12 samples" in log
    assert_promised_files(work_dir)


def test_resume_auto_continues_from_last_checkpoint(one_process_run, tiny_data, tmp_path):
    work_dir = tmp_path / "work"
    shutil.copytree(one_process_run, work_dir)
    train_here(*flags(tiny_data, work_dir, "--resume", "auto", "--num_epochs", "2"))
    assert f"resumed from {work_dir / 'model' / 'last.pth'} at the start of epoch 2" in train_log(work_dir)
    assert [row["epoch"] for row in history(work_dir)] == ["1", "2"]


def test_finetune_from_another_class_count_keeps_a_fresh_head_and_says_so(tiny_data, tmp_path):
    import torchvision

    source = tmp_path / "ten_classes.pth"
    torch.save(torchvision.models.resnet18(num_classes=10).state_dict(), source)
    train_here(*flags(tiny_data, tmp_path / "work", "--finetune", source))
    log = train_log(tmp_path / "work")
    assert "finetune: skipped 2 layer(s)" in log and "fc.weight (10, 512) vs (3, 512)" in log
    assert f"finetune: loaded {source}; fresh weights for fc.weight, fc.bias" in log


@pytest.fixture(scope="module")
def pruned_run(tiny_data, tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("prune") / "work"
    logger = logging.getLogger("basetrainer")
    saved = list(logger.handlers)
    try:
        train_here(*flags(tiny_data, work_dir, "--use_prune", "prune_bn_l1=0.0001"))
    finally:
        for handler in [h for h in logger.handlers if h not in saved]:
            handler.close()
            logger.removeHandler(handler)
    return work_dir


def test_use_prune_shrinks_the_model_and_logs_params_before_and_after(pruned_run):
    assert "pruned (torch-pruning, L1, sparsity 0.3): params 11.18M -> " in train_log(pruned_run)
    weights = torch.load(pruned_run / "model" / "model_final.pth", weights_only=True)
    assert sum(v.numel() for k, v in weights.items() if "num_batches" not in k) < 0.7 * 11.18e6
    assert "architecture" in torch.load(pruned_run / "model" / "last.pth", weights_only=True)


def test_finetune_from_a_pruned_checkpoint_keeps_its_widths_and_gets_a_new_head(pruned_run, tiny_data, tmp_path):
    for name in CLASSES[:2]:  # 2 classes where the pruned model had 3
        for split in ("train", "val"):
            shutil.copytree(tiny_data / split / name, tmp_path / "data" / split / name)
    source = glob.glob(str(pruned_run / "model" / "best_model_*.pth"))[0]
    pruned_fc = torch.load(source, weights_only=True)["model"]["fc.weight"]
    train_here(*flags(tmp_path / "data", tmp_path / "work", "--finetune", source))
    weights = torch.load(tmp_path / "work" / "model" / "model_final.pth", weights_only=True)
    assert weights["fc.weight"].shape == (2, pruned_fc.shape[1]) and pruned_fc.shape[1] < 512


def test_bn_l1_penalty_is_recorded_beside_the_classification_loss(pruned_run):
    row = history(pruned_run)[0]
    assert float(row["train_bn_l1"]) > 0
    assert float(row["train_loss"]) == pytest.approx(float(row["train_cls"]) + float(row["train_bn_l1"]), rel=1e-4)


# ---------------------------------------------------------------------- examples/custom_trainer.py


def test_custom_trainer_example_trains_one_epoch(tmp_path):
    result = run_python([CUSTOM, "--num_epochs", "1", "--work_dir", tmp_path / "work"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    assert os.path.isfile(tmp_path / "work" / "model" / "model_final.pth")
    assert float(history(tmp_path / "work")[0]["test_loss"]) > 0


# ---------------------------------------------------------------------- predict
def test_predict_writes_one_csv_row_per_image_with_the_top_classes(one_process_run, tiny_data, tmp_path):
    out = tmp_path / "predictions.csv"
    result = run_python(["-m", "basetrainer", "predict", "--checkpoint", one_process_run / "model" / "model_final.pth",
                         "--data", tiny_data / "val", "--out", out, "--topk", 2])
    assert result.returncode == 0, result.stderr[-3000:]
    with open(out) as stream:
        rows = list(csv.DictReader(stream))
    images = sorted(str(p.relative_to(tiny_data / "val")) for p in (tiny_data / "val").rglob("*.png"))
    assert [row["path"] for row in rows] == images
    assert all(row["class_1"] in CLASSES and row["class_2"] in CLASSES and row["class_1"] != row["class_2"]
               and float(row["score_1"]) >= float(row["score_2"]) for row in rows)


def test_predict_on_a_folder_without_images_is_one_line(one_process_run, tmp_path):
    result = run_python(["-m", "basetrainer", "predict", "--checkpoint", one_process_run / "model" / "last.pth",
                         "--data", tmp_path, "--out", tmp_path / "p.csv"])
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: --data: {tmp_path} holds no image (.jpg, .jpeg, .png, .ppm, .bmp, " \
                                    f".pgm, .tif, .tiff, .webp); point it at the images"
