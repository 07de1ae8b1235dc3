"""ModelCheckpoint constructed as the earlier library's was (``moder_dir``) writes that library's model files,
under its names, epoch numbering and rules for ``start_save``, ``best_save`` and ``model_nums``, in a form
that plain ``torch.load`` and ``load_state_dict`` read; constructed with ``model_dir`` it writes only ours."""
import logging
import os

import pytest
import torch
from torch import nn

from basetrainer.callbacks.model_checkpoint import ModelCheckpoint
from basetrainer.engine.events import HIGH, Callback
from support.compare import same_weights
from support.toy import ToyTrainer, toy_cfg


def toy_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def files(folder, prefix=""):
    return sorted(name for name in os.listdir(folder) if name.startswith(prefix) and name.endswith(".pth"))


def drive(folder, values, indicator="acc", **options):
    """An old-way checkpointer without a trainer, handed one test value per epoch (None: no value)."""
    model = toy_model()
    checkpointer = ModelCheckpoint(model, torch.optim.SGD(model.parameters(), lr=0.1), str(folder), len(values),
                                   indicator=indicator, **options)
    for epoch, value in enumerate(values):
        checkpointer.on_epoch_end(epoch, {"test": {} if value is None else {indicator: value}})
    return checkpointer


class ScriptedAccuracy(Callback):
    """Publishes ``logs["test"]["acc"]`` from a script, one value per epoch."""

    priority = HIGH

    def __init__(self, values):
        super().__init__()
        self.values = values

    def on_epoch_end(self, epoch, logs=None):
        logs.setdefault("test", {})["acc"] = self.values[epoch]


class OldStyleToy(ToyTrainer):
    """The toy trainer with the checkpoint callback built as the earlier example built it."""

    def build_callbacks(self, cfg):
        return [ScriptedAccuracy(cfg["accuracies"]),
                ModelCheckpoint(model=self.model, optimizer=self.optimizer, moder_dir=cfg["model_dir"],
                                epochs=cfg["num_epochs"], indicator="acc", **cfg.get("checkpoint", {}))]


def train_old_style(model_dir, accuracies, **overrides):
    cfg = toy_cfg(num_epochs=len(accuracies), accuracies=accuracies, model_dir=str(model_dir), **overrides)
    trainer = OldStyleToy(cfg)
    trainer.run()
    return trainer


def test_every_epoch_writes_the_model_and_optimizer_the_latest_model_and_the_last_model_nums_epochs(tmp_path):
    train_old_style(tmp_path, [10.0, 30.0, 20.0, 25.0], checkpoint={"model_nums": 2})
    assert files(tmp_path) == ["best_model_001_30.0000.pth", "last.prev.pth", "last.pth",
                               "latest_model_003_25.0000.pth", "model_002_20.0000.pth", "model_003_25.0000.pth",
                               "model_final.pth", "model_optimizer.pth"]


def test_model_files_are_bare_state_dicts_that_the_plain_model_loads(tmp_path):
    trainer = train_old_style(tmp_path, [10.0, 30.0])
    trained = {k: v.cpu() for k, v in trainer.model.state_dict().items()}
    for name in ("latest_model_001_30.0000.pth", "best_model_001_30.0000.pth", "model_000_10.0000.pth"):
        model = toy_model()
        model.load_state_dict(torch.load(tmp_path / name))
        assert list(model.state_dict()) == list(trained)
    latest = torch.load(tmp_path / "latest_model_001_30.0000.pth")
    assert same_weights(latest, trained)


def test_model_optimizer_holds_the_epoch_numbered_from_0_the_weights_and_the_optimizer_state(tmp_path):
    trainer = train_old_style(tmp_path, [10.0, 30.0, 20.0])
    saved = torch.load(tmp_path / "model_optimizer.pth")
    assert set(saved) == {"epoch", "model", "optimizer"} and saved["epoch"] == 2
    model = toy_model()
    model.load_state_dict(saved["model"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer.load_state_dict(saved["optimizer"])
    assert same_weights(model.state_dict(), {k: v.cpu() for k, v in trainer.model.state_dict().items()})


def test_start_save_0_keeps_the_best_model_only(tmp_path):
    drive(tmp_path, [10.0, 30.0, 20.0], start_save=0)
    assert files(tmp_path) == ["best_model_001_30.0000.pth", "last.pth"]


def test_start_save_n_keeps_every_epoch_from_n_on(tmp_path):
    drive(tmp_path, [10.0, 30.0, 20.0, 25.0], start_save=2)
    assert files(tmp_path, "model_0") == ["model_002_20.0000.pth", "model_003_25.0000.pth"]


def test_model_nums_counts_the_last_epochs_of_epochs(tmp_path):
    drive(tmp_path, [1.0] * 12)
    assert files(tmp_path, "model_0") == [f"model_{epoch:03d}_1.0000.pth" for epoch in range(2, 12)]


def test_best_save_keeps_no_best_model_before_its_epoch(tmp_path):
    drive(tmp_path, [90.0, 10.0, 20.0, 15.0], best_save=2)
    assert files(tmp_path, "best_model_") == ["best_model_002_20.0000.pth"]


def test_a_tie_goes_to_the_later_epoch(tmp_path):
    drive(tmp_path, [30.0, 30.0, 20.0])
    assert files(tmp_path, "best_model_") == ["best_model_001_30.0000.pth"]


def test_inverse_keeps_the_lowest_value(tmp_path):
    drive(tmp_path, [0.5, 0.3, 0.4], indicator="loss", inverse=True)
    assert files(tmp_path, "best_model_") == ["best_model_001_0.3000.pth"]


def test_a_group_of_losses_counts_as_the_sum_of_its_terms_without_its_total(tmp_path):
    model = toy_model()
    checkpointer = ModelCheckpoint(model, torch.optim.SGD(model.parameters(), lr=0.1), str(tmp_path), 1,
                                   indicator="loss", inverse=True)
    checkpointer.on_epoch_end(0, {"test": {"loss": {"cls": 0.25, "box": 0.5, "total_loss": 0.75}}})
    assert files(tmp_path, "best_model_") == ["best_model_000_0.7500.pth"]


def test_without_a_test_set_the_training_value_counts(tmp_path):
    model = toy_model()
    checkpointer = ModelCheckpoint(model, torch.optim.SGD(model.parameters(), lr=0.1), str(tmp_path), 1,
                                   indicator="acc")
    checkpointer.on_epoch_end(0, {"train": {"acc": 40.0}, "test": {}})
    assert files(tmp_path, "best_model_") == ["best_model_000_40.0000.pth"]


def test_without_a_value_the_names_have_none_and_no_best_model_is_kept(tmp_path):
    drive(tmp_path, [None, None])
    assert files(tmp_path) == ["last.pth", "latest_model_001.pth", "model_000.pth", "model_001.pth",
                               "model_optimizer.pth"]


def test_a_nan_value_never_becomes_the_best(tmp_path):
    drive(tmp_path, [float("nan"), 20.0])
    assert files(tmp_path, "best_model_") == ["best_model_001_20.0000.pth"]


def test_constructed_with_model_dir_it_writes_none_of_the_earlier_files(tmp_path):
    model = toy_model()
    checkpointer = ModelCheckpoint(model, torch.optim.SGD(model.parameters(), lr=0.1), model_dir=str(tmp_path),
                                   indicator="acc", epochs=2)
    for epoch, value in enumerate([10.0, 30.0]):
        checkpointer.on_epoch_end(epoch, {"test": {"acc": value}})
    assert files(tmp_path) == ["best_model_002_30.0000.pth", "last.pth"]  # epochs counted from 1
    assert set(torch.load(tmp_path / "best_model_002_30.0000.pth")) == {"model", "epoch", "acc"}


def test_best_save_and_model_nums_with_model_dir_are_ignored_with_a_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="basetrainer"):
        ModelCheckpoint(model_dir=str(tmp_path), best_save=3, model_nums=5)
    assert [r.getMessage() for r in caplog.records] == [(
        "ModelCheckpoint(model_dir=...): best_save and model_nums are ignored: they choose the earlier library's "
        "files, written when the folder is given as moder_dir= (with model_dir=, start_save is the first epoch of "
        "the best models and save_best_k how many are kept)")]


def test_save_best_k_with_moder_dir_is_ignored_with_a_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="basetrainer"):
        drive(tmp_path, [10.0, 30.0, 20.0], save_best_k=3)
    assert files(tmp_path, "best_model_") == ["best_model_001_30.0000.pth"]
    assert "save_best_k=3 is ignored" in caplog.text


def test_a_resumed_run_keeps_the_best_value_and_drops_the_files_of_the_epochs_it_trains_again(tmp_path):
    accuracies = [10.0, 30.0, 20.0, 25.0]
    train_old_style(tmp_path, accuracies[:2])
    # written by a run killed during epoch 2, after its files and before last.pth
    for stray in ("model_002_99.0000.pth", "latest_model_002_99.0000.pth", "best_model_002_99.0000.pth"):
        (tmp_path / stray).write_bytes((tmp_path / "model_final.pth").read_bytes())
    train_old_style(tmp_path, accuracies, resume="auto", work_dir=str(tmp_path))
    assert files(tmp_path, "best_model_") == ["best_model_001_30.0000.pth"]  # 20 and 25 do not beat 30
    assert files(tmp_path, "latest_") == ["latest_model_003_25.0000.pth"]
    assert files(tmp_path, "model_0") == [f"model_{e:03d}_{v:.4f}.pth" for e, v in enumerate(accuracies)]


@pytest.mark.parametrize("wrapper", [nn.DataParallel, None])
def test_weights_have_no_wrapper_prefixes_whatever_holds_the_model(tmp_path, wrapper):
    model = toy_model()
    held = wrapper(model) if wrapper else model
    checkpointer = ModelCheckpoint(held, torch.optim.SGD(model.parameters(), lr=0.1), str(tmp_path), 1,
                                   indicator="acc")
    checkpointer.on_epoch_end(0, {"test": {"acc": 50.0}})
    assert list(torch.load(tmp_path / "best_model_000_50.0000.pth")) == list(model.state_dict())
    assert list(torch.load(tmp_path / "model_optimizer.pth")["model"]) == list(model.state_dict())
