"""The run's summary (basetrainer/engine/run_summary.py): what the engine itself measured, written to
log/run_summary.json by every trainer, whatever callbacks it has (none here but a loss recorder and checkpoints)."""
import json
import time

import pytest
import torch

from basetrainer.callbacks import LossesRecorder, ModelCheckpoint
from basetrainer.engine.events import Callback
from basetrainer.engine.run_summary import RunSummary, numbers
from support.toy import Crash, ToyTrainer, toy_cfg


def summary_of(work_dir):
    return json.loads((work_dir / "log" / "run_summary.json").read_text())


def test_a_trainer_without_loggers_writes_each_epoch_s_time_speed_memory_and_evaluation(tmp_path):
    trainer = ToyTrainer(toy_cfg(num_epochs=3, work_dir=str(tmp_path), callbacks=[LossesRecorder()]))
    logs = trainer.run()
    summary = summary_of(tmp_path)
    assert [record["epoch"] for record in summary["epochs"]] == [1, 2, 3]
    times = [record["time_s"] for record in summary["epochs"]]
    assert 0 < times[0] < times[1] < times[2] <= summary["training_s"]
    assert all(record["samples_per_s"] > 0 and record["peak_memory_gib"] > 0 for record in summary["epochs"])
    assert summary["epochs"][-1]["test"] == {"loss": pytest.approx(float(logs["test"]["loss"]))}
    assert (summary["steps"], summary["samples"], summary["finished"]) == (trainer.state.global_step, 3 * 128, True)


def test_an_epoch_s_speed_counts_its_batches_up_to_the_last_one_s_end_and_not_its_evaluation(tmp_path):
    class SlowEvaluation(Callback):
        def on_test_begin(self, logs=None):
            time.sleep(0.5)

    trainer = ToyTrainer(toy_cfg(num_epochs=2, work_dir=str(tmp_path), callbacks=[SlowEvaluation()]))
    trainer.run()
    epochs = summary_of(tmp_path)["epochs"]
    batches_s = [128 / record["samples_per_s"] for record in epochs]  # the speed's seconds, from its samples
    assert batches_s[0] <= epochs[0]["time_s"] - 0.5  # the epoch's time holds the evaluation's sleep too
    assert batches_s[1] <= epochs[1]["time_s"] - epochs[0]["time_s"] - 0.5


def test_the_lr_is_the_rate_the_optimizer_trained_at_after_lr_scaling(tmp_path):
    cfg = toy_cfg(num_epochs=1, work_dir=str(tmp_path), batch_size=16, accumulate_grad_batches=2,
                  lr_scaling={"rule": "linear", "base_batch_size": 8})
    ToyTrainer(cfg).run()
    summary = summary_of(tmp_path)
    assert (summary["lr"], summary["accumulate_grad_batches"]) == (pytest.approx(0.4), 2)  # 0.1 x 32 / 8


def test_a_run_that_fails_leaves_the_epochs_it_finished_and_says_it_did_not(tmp_path):
    with pytest.raises(RuntimeError):
        ToyTrainer(toy_cfg(num_epochs=3, work_dir=str(tmp_path), callbacks=[Crash(batch=2, epoch=1)])).run()
    summary = summary_of(tmp_path)
    assert [record["epoch"] for record in summary["epochs"]] == [1] and summary["finished"] is False


def test_a_resumed_run_carries_the_epochs_and_the_training_time_of_the_run_it_continues(tmp_path):
    checkpoints = str(tmp_path / "model")
    ToyTrainer(toy_cfg(num_epochs=1, work_dir=str(tmp_path), callbacks=[ModelCheckpoint(model_dir=checkpoints)])).run()
    first = summary_of(tmp_path)
    ToyTrainer(toy_cfg(num_epochs=2, work_dir=str(tmp_path), resume="auto",
                       callbacks=[ModelCheckpoint(model_dir=checkpoints)])).run()
    summary = summary_of(tmp_path)
    assert summary["epochs"][0] == first["epochs"][0] and summary["epochs"][1]["epoch"] == 2
    assert summary["epochs"][1]["time_s"] > first["epochs"][0]["time_s"]  # counted on from the checkpoint


def test_the_published_values_kept_are_the_numbers_nested_as_published():
    published = {"Acc": 97.5, "loss": torch.tensor(0.25), "val": {"Acc": 90}, "confusion": torch.ones(2, 2),
                 "names": "a b", "flag": True}
    assert numbers(published) == {"Acc": 97.5, "loss": 0.25, "val": {"Acc": 90.0}}


def test_events_fired_by_hand_outside_a_run_write_nothing(tmp_path):
    summary = RunSummary(str(tmp_path / "log"))
    summary.on_epoch_end(0, {"test": {"Acc": 1.0}})
    assert not (tmp_path / "log").exists()


def test_a_trainer_without_a_work_dir_writes_no_summary(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trainer = ToyTrainer(toy_cfg(num_epochs=1))
    trainer.run()
    summary = next(callback for callback in trainer.callbacks if isinstance(callback, RunSummary))
    assert list(tmp_path.iterdir()) == [] and [record["epoch"] for record in summary.epochs] == [1]
