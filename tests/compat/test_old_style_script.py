"""A script written as the earlier library's example taught (``old_style_script.py``) runs unchanged, in 1 and 2
processes, on an ImageFolder of generated pictures; the model files its ``ModelCheckpoint`` (constructed the
old way) writes are those the earlier library wrote, and inference code written for them
(``old_inference_script.py``, plain ``torch.load`` and ``load_state_dict``) loads them and predicts."""
import csv
import json
import os
import re

import pytest
import torch

from basetrainer.export import model_from_checkpoint
from basetrainer.models.build_models import get_models
from support.compare import same_weights
from support.images import write_class_images
from support.processes import free_port, run_python

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "old_style_script.py")
INFERENCE = os.path.join(HERE, "old_inference_script.py")
CLASSES = ["circle", "square", "stripes"]
TRAIN_PER_CLASS = 24


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    write_class_images(str(root / "train"), CLASSES, TRAIN_PER_CLASS, seed=0)
    write_class_images(str(root / "val"), CLASSES, 8, seed=1)
    return root


def run_script(images, work_dir, *flags):
    result = run_python([SCRIPT, "--train_data", images / "train", "--test_data", images / "val",
                         "--work_dir", work_dir, "--dist_url", f"tcp://127.0.0.1:{free_port()}", *flags])
    assert result.returncode == 0, result.stderr[-3000:]
    return work_dir


@pytest.fixture(scope="module")
def one_process(images, tmp_path_factory):
    return run_script(images, tmp_path_factory.mktemp("one_process"))


@pytest.fixture(scope="module")
def two_processes(images, tmp_path_factory):
    return run_script(images, tmp_path_factory.mktemp("two_processes"), "--distributed", "--gpu_id", "0", "1")


@pytest.fixture(scope="module")
def predictions(images, one_process, two_processes):
    """What the inference script (one process, for both runs) computes with each run's best and latest model."""
    model_dirs = [one_process / "model", two_processes / "model"]
    result = run_python([INFERENCE, "--data", images / "val", "--model_dirs", *model_dirs])
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


RUNS = pytest.mark.parametrize("run", ["one_process", "two_processes"])


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
    rows = history(work_dir)
    assert len(rows) == 1 and float(rows[0]["train_Accuracy"]) > 0 and rows[0]["test_Accuracy"]


@pytest.mark.slow
@RUNS
def test_old_style_script_finds_a_config_file_to_copy_without_one_given(run, request):
    """parser_config with no config file writes the config and names it in cfg.config_file, so that
    file_utils.copy_file_to_dir(cfg.config_file, cfg.work_dir) copies it."""
    work_dir = request.getfixturevalue(run)
    assert (work_dir / "args_config.yaml").is_file() and (work_dir / "setup_config.yaml").is_file()


@pytest.mark.slow
@RUNS
def test_the_earlier_library_files_are_written_once_beside_last_pth_numbered_from_epoch_0(run, request):
    work_dir = request.getfixturevalue(run)
    accuracy = float(history(work_dir)[0]["test_Accuracy"])
    names = sorted(name for name in os.listdir(work_dir / "model") if not name.endswith(".sha256"))
    assert names == sorted([f"best_model_000_{accuracy:.4f}.pth", f"latest_model_000_{accuracy:.4f}.pth",
                            f"model_000_{accuracy:.4f}.pth", "model_optimizer.pth", "last.pth",
                            "model_final.pth"])


@pytest.mark.slow
@RUNS
def test_inference_code_for_the_earlier_library_loads_the_best_and_latest_models_and_predicts(run, request,
                                                                                            predictions):
    """The value in a model file's name is the test accuracy of its epoch; predicting with the file, loaded
    by plain torch.load and load_state_dict, gives that accuracy again."""
    work_dir = request.getfixturevalue(run)
    scores = predictions[str(work_dir / "model")]
    assert sorted(name.split("_0")[0] for name in scores) == ["best_model", "latest_model"]
    for name, accuracy in scores.items():
        assert accuracy == pytest.approx(float(re.search(r"_(\d+\.\d{4})\.pth$", name).group(1)), abs=1e-3)


@pytest.mark.slow
@RUNS
def test_model_optimizer_loads_into_the_plain_model_and_a_fresh_optimizer(run, request):
    saved = torch.load(request.getfixturevalue(run) / "model" / "model_optimizer.pth")
    assert saved["epoch"] == 0
    model = get_models("mobilenet_v2", input_size=[16, 16], num_classes=len(CLASSES), pretrained=False)
    model.load_state_dict(saved["model"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    optimizer.load_state_dict(saved["optimizer"])
    assert all("momentum_buffer" in state for state in optimizer.state.values())


@pytest.mark.slow
@RUNS
def test_export_takes_model_optimizer_as_its_weights(run, request):
    model_dir = request.getfixturevalue(run) / "model"
    loaded = model_from_checkpoint(str(model_dir / "model_optimizer.pth"))
    assert same_weights(loaded.model.state_dict(), torch.load(model_dir / "model_optimizer.pth")["model"])
    assert loaded.weights.startswith("the training weights from model_optimizer.pth")


@pytest.mark.slow
@RUNS
def test_num_samples_counts_the_whole_training_set_in_one_and_two_processes(run, request):
    """As the earlier library's single-process runs counted, and its example's mean images per class assume."""
    log = (request.getfixturevalue(run) / "log" / "train.log").read_text()
    assert f"num_samples(train):{TRAIN_PER_CLASS * len(CLASSES)} num_classes:{len(CLASSES)}" in log
