"""Time to target (``target`` config key, basetrainer/engine/target.py): the first evaluation that reaches it is
recorded exactly, stops the run when asked, reaches target.json, the history files and the trackers, survives a
resume, and a metric nothing publishes is refused before training."""
import json

import pytest
from torch.utils.data import DataLoader

from basetrainer.callbacks.log_history import LogHistory
from basetrainer.callbacks.losses_recorder import LossesRecorder
from basetrainer.callbacks.model_checkpoint import ModelCheckpoint
from basetrainer.callbacks.multi_losses_recorder import MultiLossesRecorder
from basetrainer.checkpoint.files import load_checkpoint
from basetrainer.engine.events import HIGH, Callback
from basetrainer.engine.options import LoopOptions
from basetrainer.engine.target import TARGET_KEYS
from basetrainer.errors import ConfigError
from basetrainer.loggers.base import epoch_scalars
from basetrainer.metric.accuracy_recorder import AccuracyRecorder
from basetrainer.utils.published import published_names
from support.toy import Crash, ToyTrainer, blobs, toy_cfg

# The toy trainer: 128 samples in batches of 16, drop_last: 8 optimizer steps per epoch.
BATCH = 16
TIME_TO_TARGET = "basetrainer.engine.target.TimeToTarget"  # its state's key in a checkpoint


class UndeclaredScore(Callback):
    """Publishes ``logs["test"]["score"]``, the optimizer steps taken so far, and says nothing about it (a
    callback written before ``publishes``)."""

    priority = HIGH

    def on_test_end(self, logs=None):
        logs["test"]["score"] = float(self.state.global_step)


class StepScore(UndeclaredScore):
    """The same, declared."""

    def publishes(self):
        return ("score",)


def train(tmp_path, target, callbacks=(), **cfg):
    cfg = toy_cfg(**{"work_dir": str(tmp_path), "eval_every_n_iters": 3, "num_epochs": 3, "target": target, **cfg})
    trainer = ToyTrainer({**cfg, "callbacks": [StepScore(), *callbacks]})
    trainer.run()
    return trainer


def target_file(tmp_path) -> dict:
    return json.loads((tmp_path / "log" / "target.json").read_text())


def test_the_first_evaluation_that_reaches_the_target_records_its_step_epoch_and_samples(tmp_path):
    train(tmp_path, {"metric": "score", "value": 7})  # evaluations at steps 3, 6, 9...: 9 is the first >= 7
    saved = target_file(tmp_path)
    assert (saved["reached"], saved["step"], saved["epoch"], saved["samples"], saved["reached_value"]) == \
        (True, 9, 2, 9 * BATCH, 9.0)
    assert saved["time_s"] > 0


def test_mode_min_reaches_the_target_at_or_below_its_value(tmp_path):
    class Falling(StepScore):
        def on_test_end(self, logs=None):
            logs["test"]["score"] = 100.0 - self.state.global_step

    trainer = ToyTrainer(toy_cfg(work_dir=str(tmp_path), eval_every_n_iters=3, num_epochs=3, callbacks=[Falling()],
                                 target={"metric": "score", "value": 94, "mode": "min"}))
    trainer.run()
    assert target_file(tmp_path)["step"] == 6


def test_test_prefix_names_the_evaluation_value(tmp_path):
    train(tmp_path, {"metric": "test/score", "value": 4})
    assert target_file(tmp_path)["step"] == 6


def test_target_json_holds_exactly_the_contract_keys_with_nulls_when_not_reached(tmp_path):
    train(tmp_path, {"metric": "score", "value": 1000})
    saved = target_file(tmp_path)
    assert tuple(saved) == TARGET_KEYS
    assert saved == {"metric": "score", "value": 1000.0, "mode": "max", "reached": False, "reached_value": None,
                     "time_s": None, "step": None, "epoch": None, "samples": None}


def test_stop_true_ends_training_at_that_step_and_saves_a_checkpoint_there(tmp_path):
    trainer = train(tmp_path, {"metric": "score", "value": 5, "stop": True},
                    callbacks=[ModelCheckpoint(model_dir=str(tmp_path / "model"))])
    assert trainer.state.global_step == 6
    assert load_checkpoint(str(tmp_path / "model" / "last.pth"))["iteration"] == 6
    assert (tmp_path / "model" / "model_final.pth").is_file()


def test_a_resumed_run_keeps_the_first_reach(tmp_path):
    checkpoints = [ModelCheckpoint(model_dir=str(tmp_path / "model"))]
    train(tmp_path, {"metric": "score", "value": 2}, callbacks=checkpoints, num_epochs=1)
    train(tmp_path, {"metric": "score", "value": 2}, callbacks=[ModelCheckpoint(model_dir=str(tmp_path / "model"))],
          num_epochs=2, resume="auto")
    assert target_file(tmp_path)["step"] == 3


def test_a_target_reached_after_a_resume_counts_the_time_and_samples_of_both_runs(tmp_path):
    train(tmp_path, {"metric": "score", "value": 12}, callbacks=[ModelCheckpoint(model_dir=str(tmp_path / "model"))],
          num_epochs=1)
    trained_before = load_checkpoint(str(tmp_path / "model" / "last.pth"))["callbacks"][TIME_TO_TARGET]["seconds"]
    train(tmp_path, {"metric": "score", "value": 12}, callbacks=[ModelCheckpoint(model_dir=str(tmp_path / "model"))],
          num_epochs=2, resume="auto")
    saved = target_file(tmp_path)
    assert (saved["step"], saved["samples"]) == (12, 12 * BATCH)
    assert saved["time_s"] > trained_before


def test_a_stopped_run_resumed_stays_stopped(tmp_path):
    target = {"metric": "score", "value": 2, "stop": True}
    train(tmp_path, target, callbacks=[ModelCheckpoint(model_dir=str(tmp_path / "model"))])
    again = train(tmp_path, target, callbacks=[ModelCheckpoint(model_dir=str(tmp_path / "model"))], resume="auto")
    assert again.state.global_step == 3  # it stopped there, and trains no further


def test_the_record_is_in_every_epoch_record_of_the_history_files_with_the_same_columns(tmp_path):
    history = LogHistory(tmp_path, loggers=["csv"], plot=False)
    train(tmp_path, {"metric": "score", "value": 10}, callbacks=[history])
    records = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [record["target"]["step"] for record in records] == [None, 12, 12]
    header, *rows = (tmp_path / "history.csv").read_text().splitlines()
    assert header.endswith("target_reached_value,target_time_s,target_step,target_epoch,target_samples")
    assert [row.split(",")[-3:] for row in rows] == [["", "", ""], ["12", "2", str(12 * BATCH)]] + \
        [["12", "2", str(12 * BATCH)]]


def test_trackers_get_the_record_as_scalars_once_reached():
    record = {"epoch": 2, "lr": 0.1, "train": {}, "test": {"Acc": 98.2},
              "target": {"reached_value": 98.2, "time_s": 41.5, "step": 420, "epoch": 2, "samples": 26880}}
    unreached = {**record, "target": dict.fromkeys(record["target"])}
    assert {name: value for name, value in epoch_scalars(record).items() if name.startswith("target/")} == {
        "target/reached_value": 98.2, "target/time_s": 41.5, "target/step": 420, "target/epoch": 2,
        "target/samples": 26880}
    assert not any(name.startswith("target/") for name in epoch_scalars(unreached))


def test_a_metric_no_callback_publishes_is_refused_before_training_naming_those_published(tmp_path):
    with pytest.raises(ConfigError, match=r"no callback publishes the metric 'Acc'; the evaluations publish "
                                          r"score, loss: set target.metric"):
        ToyTrainer(toy_cfg(work_dir=str(tmp_path), target={"metric": "Acc", "value": 90},
                           callbacks=[StepScore(), LossesRecorder()]))
    assert list(tmp_path.iterdir()) == []


def test_several_test_sets_publish_each_name_under_its_set(tmp_path):
    class TwoSets(ToyTrainer):
        def build_test_loader(self, cfg):
            return {"val": self.build_dataloader(blobs(32, seed=1), 16, phase="test", shuffle=False),
                    "hard": self.build_dataloader(blobs(32, seed=2), 16, phase="test", shuffle=False)}

    with pytest.raises(ConfigError, match="publish val/score, hard/score"):
        TwoSets(toy_cfg(work_dir=str(tmp_path), target={"metric": "score", "value": 1}, callbacks=[StepScore()]))
    trainer = TwoSets(toy_cfg(work_dir=str(tmp_path), target={"metric": "hard/score", "value": 3},
                              eval_every_n_iters=3, callbacks=[StepScore()]))
    trainer.run()
    assert target_file(tmp_path)["step"] == 3


def test_a_callback_that_declares_nothing_is_read_at_the_evaluations(tmp_path):
    trainer = ToyTrainer(toy_cfg(work_dir=str(tmp_path), eval_every_n_iters=3, num_epochs=3,
                                 target={"metric": "score", "value": 5}, callbacks=[UndeclaredScore()]))
    trainer.run()
    assert target_file(tmp_path)["step"] == 6


def test_beside_a_callback_that_declares_nothing_an_unknown_metric_is_refused_at_the_first_evaluation(tmp_path):
    trainer = ToyTrainer(toy_cfg(work_dir=str(tmp_path), eval_every_n_iters=3, num_epochs=3,
                                 target={"metric": "Acc", "value": 90}, callbacks=[UndeclaredScore()]))
    with pytest.raises(ConfigError, match="no callback publishes the metric 'Acc'; the evaluations publish score"):
        trainer.run()
    assert trainer.state.global_step == 3


@pytest.mark.parametrize("recorder", [LossesRecorder(), AccuracyRecorder(report=False, topk=(1, 3)),
                                      MultiLossesRecorder(["first", "second"]),
                                      MultiLossesRecorder({"loss": ["first", "second"]})],
                         ids=["losses", "accuracy-top3", "multi-losses-list", "multi-losses-group"])
def test_each_stock_recorder_declares_what_it_publishes(recorder):
    two_losses = {"loss": lambda outputs, targets: {"first": outputs.pow(2).mean(), "second": outputs.abs().mean()}}
    cfg = toy_cfg(callbacks=[recorder], **(two_losses if isinstance(recorder, MultiLossesRecorder) else {}))
    logs = ToyTrainer(cfg).run()
    assert sorted(recorder.publishes()) == sorted(published_names(logs["test"]))


def test_a_multi_losses_recorder_that_learns_its_names_from_the_first_batch_declares_nothing():
    assert MultiLossesRecorder().publishes() is None


@pytest.mark.parametrize("target, message", [
    ({"value": 98.0}, r"config key 'target' expects .* with metric and value set or null, got .*: metric is missing"),
    ({"metric": "Acc"}, r"config key 'target' expects .*: value is missing"),
    ({"metric": "Acc", "value": 98.0, "mode": "up"}, "config key 'target' expects .*: mode is str 'up'"),
    ({"metric": "Acc", "value": 98.0, "when": 3}, "config key 'target' expects .*: when is no field of it"),
])
def test_a_target_without_metric_or_value_or_with_an_unknown_mode_is_a_one_line_error(target, message):
    with pytest.raises(ConfigError, match=message) as error:
        LoopOptions.from_config(toy_cfg(target=target))
    assert "\n" not in str(error.value)


def test_an_evaluation_outside_training_reaches_nothing(tmp_path):
    trainer = ToyTrainer(toy_cfg(work_dir=str(tmp_path), target={"metric": "score", "value": 0},
                                 callbacks=[StepScore()]))
    trainer.evaluate()
    assert trainer.callbacks[-1].record is None


def test_a_plain_loader_of_ones_own_counts_its_samples(tmp_path):
    trainer = ToyTrainer(toy_cfg(work_dir=str(tmp_path), eval_every_n_iters=4, num_epochs=1, plain_loader=True,
                                 target={"metric": "score", "value": 4}, callbacks=[StepScore()]))
    assert isinstance(trainer.train_loader, DataLoader)
    trainer.run()
    assert target_file(tmp_path)["samples"] == 4 * BATCH


def test_a_run_that_does_not_end_leaves_no_target_json_not_even_an_earlier_runs(tmp_path):
    train(tmp_path, {"metric": "score", "value": 1})
    assert (tmp_path / "log" / "target.json").is_file()
    with pytest.raises(RuntimeError, match="boom"):
        train(tmp_path, {"metric": "score", "value": 1}, callbacks=[Crash(batch=5)])
    assert not (tmp_path / "log" / "target.json").exists()
