"""The classification task with a timm backbone (``net_type: timm/resnet10t``), in this process: two bf16 steps in
channels-last with its blocks' activations checkpointed, its normalisation taken from timm, then ``predict`` on
what the run wrote (tests/models/test_timm_models.py exports one to ONNX)."""
import csv

import pytest
import torch

from basetrainer.config import load_config
from basetrainer.tasks import classification
from basetrainer.tasks.classification.predict import predict_images
from support.images import write_class_images

CLASSES = ("blue", "green", "red")
TIMM_MEAN, TIMM_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


@pytest.fixture(scope="module")
def timm_run(tmp_path_factory):
    """The run's work_dir and the images it trained on."""
    root = tmp_path_factory.mktemp("timm")
    data = write_class_images(root / "train", CLASSES, per_class=4)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        classification.run(classification.parse_config([
            "--train_data", str(data), "--test_data", str(data), "--work_dir", str(root / "work"),
            "net_type=timm/resnet10t", "input_size=[32,32]", "num_epochs=null", "max_iters=2", "batch_size=6",
            "amp=bf16", "channels_last=true", "activation_checkpointing=[BasicBlock]", "num_workers=0",
            "progress=false", "loggers=[csv]"]))
    finally:
        torch.set_num_threads(threads)
    return root / "work", data


def test_the_start_up_line_says_the_mean_and_std_came_from_the_timm_model(timm_run):
    work_dir, _ = timm_run
    log = (work_dir / "log" / "train.log").read_text()
    assert (f"model: timm/resnet10t, 4.92M parameters, input 32x32, mean {TIMM_MEAN}, std {TIMM_STD} "
            f"(rgb_mean, rgb_std: timm/resnet10t's defaults)") in log


def test_the_saved_config_holds_the_mean_and_std_the_run_used(timm_run):
    work_dir, _ = timm_run
    saved = load_config(str(work_dir / "config.yaml"))
    assert (saved.rgb_mean, saved.rgb_std, saved.input_size) == (TIMM_MEAN, TIMM_STD, [32, 32])


def test_predict_rebuilds_the_timm_model_from_the_run_and_classifies_every_image(timm_run, tmp_path):
    work_dir, data = timm_run
    rows = predict_images(str(work_dir / "model" / "model_final.pth"), str(data), str(tmp_path / "p.csv"))
    with open(tmp_path / "p.csv") as stream:
        predicted = list(csv.DictReader(stream))
    assert rows == len(predicted) == 12 and {row["class"] for row in predicted} <= set(CLASSES)

