"""What the earlier library wrote loads through the safe loader: a bare state_dict (its best, latest and
per-epoch models) and model_optimizer.pth as finetune sources, and model_optimizer.pth as the weights of
``basetrainer export`` and ``basetrainer predict`` in a run folder of the earlier library itself."""
import csv
import os

import pytest
import torch
import yaml
from PIL import Image

from basetrainer.cli import main as cli
from basetrainer.export import model_from_checkpoint
from basetrainer.models.build_models import get_models
from basetrainer.tasks.classification import ClassificationTrainer, build_transform
from basetrainer.tasks.classification.config import parse_config
from basetrainer.tasks.classification.predict import predict_images
from support.compare import same_weights
from support.images import write_class_images

CLASSES = ["circle", "square", "stripes"]
INPUT_SIZE = [16, 16]
NET_TYPE = "mobilenet_v2"  # the earlier example's default


@pytest.fixture(scope="module")
def earlier_run(tmp_path_factory):
    """A run folder as the earlier library's example left it: setup_config.yaml (saved before the data named
    the classes, so without num_classes), model/model_optimizer.pth and a best model, written by plain torch.save."""
    work_dir = tmp_path_factory.mktemp("earlier_run")
    torch.manual_seed(1)
    model = get_models(NET_TYPE, input_size=INPUT_SIZE, num_classes=len(CLASSES), pretrained=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 3, 16, 16)).sum().backward()
    optimizer.step()  # momentum buffers in the optimizer's state, as after training
    os.makedirs(work_dir / "model")
    torch.save({"epoch": 3, "model": model.state_dict(), "optimizer": optimizer.state_dict()},
               work_dir / "model" / "model_optimizer.pth")
    torch.save(model.state_dict(), work_dir / "model" / "best_model_003_66.6667.pth")
    with open(work_dir / "setup_config.yaml", "w") as stream:
        yaml.safe_dump({"net_type": NET_TYPE, "input_size": INPUT_SIZE, "batch_size": 8, "lr": 0.1,
                        "num_epochs": 4, "work_dir": str(work_dir), "model_root": str(work_dir / "model")}, stream)
    return work_dir, {k: v.clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    write_class_images(str(root / "train"), CLASSES, per_class=6)
    return root


@pytest.mark.parametrize("name", ["model_optimizer.pth", "best_model_003_66.6667.pth"])
def test_finetune_starts_from_an_earlier_model_file(earlier_run, images, tmp_path, name):
    work_dir, weights = earlier_run
    cfg = parse_config(["--train_data", str(images / "train"), "--work_dir", str(tmp_path), "--net_type", NET_TYPE,
                        "--input_size", "16", "16", "--batch_size", "4", "--test_data", "", "--finetune", str(work_dir / "model" / name)])
    trainer = ClassificationTrainer(cfg)
    assert same_weights({k: v.cpu() for k, v in trainer.model.state_dict().items()}, weights)


def test_export_rebuilds_the_network_of_an_earlier_run_from_model_optimizer(earlier_run):
    work_dir, weights = earlier_run
    loaded = model_from_checkpoint(str(work_dir / "model" / "model_optimizer.pth"))
    assert same_weights(loaded.model.state_dict(), weights)
    assert loaded.weights == ("the training weights from model_optimizer.pth (the earlier library's model and "
                              "optimizer file)")
    assert loaded.config["num_classes"] == len(CLASSES) and loaded.input_size == INPUT_SIZE


def test_export_writes_the_weights_of_model_optimizer_as_one_state_dict(earlier_run, tmp_path):
    work_dir, weights = earlier_run
    cli(["export", str(work_dir / "model" / "model_optimizer.pth"), "--out", str(tmp_path / "w.pth")])
    assert same_weights(torch.load(tmp_path / "w.pth", weights_only=True), weights)


def test_predict_reads_model_optimizer_of_an_earlier_run(earlier_run, images, tmp_path):
    work_dir, weights = earlier_run
    rows = predict_images(str(work_dir / "model" / "model_optimizer.pth"), str(images / "train"),
                          str(tmp_path / "predictions.csv"))
    with open(tmp_path / "predictions.csv") as stream:
        predicted = list(csv.DictReader(stream))
    model = get_models(NET_TYPE, input_size=INPUT_SIZE, num_classes=len(CLASSES), pretrained=False)
    model.load_state_dict(weights)
    transform = build_transform(parse_config(["--input_size", "16", "16"]), train=False)
    first = Image.open(images / "train" / predicted[0]["path"]).convert("RGB")
    with torch.no_grad():
        expected = model.eval()(transform(first)[None]).argmax(dim=1).item()
    assert rows == len(predicted) == 6 * len(CLASSES) and predicted[0]["class"] == str(expected)
