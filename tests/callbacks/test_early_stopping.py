"""EarlyStopping stops at the right epoch, in both modes, with min_delta, and across a resume."""
import logging

import pytest

from basetrainer.callbacks.early_stopping import EarlyStopping
from basetrainer.callbacks.model_checkpoint import ModelCheckpoint
from basetrainer.engine.events import HIGH, LOW, LOWEST, NORMAL, Callback
from support.workers.metrics_worker import ClassifierTrainer, cfg


class FakeTrainer:
    stop_training = False

    def request_stop(self):
        self.stop_training = True


def stop_epoch(callback, values, phase="test"):
    """Feeds one value per epoch; returns the epoch after which training stops (None: never)."""
    trainer = FakeTrainer()
    callback.set_trainer(trainer)
    for epoch, value in enumerate(values):
        callback.on_epoch_end(epoch, {"train": {}, "test": {}, phase: {"score": value}})
        if trainer.stop_training:
            return epoch
    return None


def test_stops_after_patience_epochs_without_improvement():
    # best 2.0 at epoch 1; epochs 2, 3 do not beat it -> stop after epoch 3
    assert stop_epoch(EarlyStopping("score", patience=2), [1.0, 2.0, 2.0, 1.5, 3.0]) == 3


def test_an_improvement_resets_the_count():
    assert stop_epoch(EarlyStopping("score", patience=2), [1.0, 0.5, 2.0, 1.0, 3.0, 2.0, 2.0]) == 6


def test_min_mode_wants_lower_values():
    assert stop_epoch(EarlyStopping("score", patience=1, mode="min"), [3.0, 2.0, 2.5]) == 2


def test_gains_within_min_delta_do_not_count():
    assert stop_epoch(EarlyStopping("score", patience=2, min_delta=0.1), [1.0, 1.05, 1.1, 1.3]) == 2


def test_nan_never_improves():
    assert stop_epoch(EarlyStopping("score", patience=2), [1.0, float("nan"), float("nan")]) == 2


def test_never_stops_while_improving():
    assert stop_epoch(EarlyStopping("score", patience=1), [1.0, 2.0, 3.0, 4.0]) is None


def test_falls_back_to_the_train_value_with_one_warning(caplog):
    callback = EarlyStopping("score", patience=1)
    with caplog.at_level(logging.WARNING, logger="basetrainer"):
        assert stop_epoch(callback, [1.0, 0.5], phase="train") == 1
    assert len(caplog.records) == 1 and "training value" in caplog.records[0].getMessage()


def test_resume_in_the_middle_continues_the_count():
    values = [1.0, 2.0, 1.5, 1.0, 0.5, 0.1]  # patience 3: stop after epoch 4
    first = EarlyStopping("score", patience=3)
    assert stop_epoch(first, values[:3]) is None
    resumed = EarlyStopping("score", patience=3)
    resumed.load_state_dict(first.state_dict())
    trainer = FakeTrainer()
    resumed.set_trainer(trainer)
    for epoch in range(3, len(values)):
        resumed.on_epoch_end(epoch, {"test": {"score": values[epoch]}})
        if trainer.stop_training:
            break
    assert epoch == 4 and resumed.stopped_epoch == 4


def test_runs_after_recorders_and_before_loggers_and_checkpoints():
    assert max(HIGH, NORMAL) < EarlyStopping.priority < min(LOW, LOWEST)


def test_bad_mode_is_a_clear_error():
    with pytest.raises(ValueError, match="mode must be 'max' or 'min'"):
        EarlyStopping("score", mode="maximum")


# ---------------------------------------------------------------------- with the trainer
SCORES = [1.0, 2.0, 1.9, 1.8, 1.7, 1.6, 1.5, 1.4, 1.3, 1.2]  # patience 3: stop after epoch 4


class ScriptedScore(Callback):
    """Publishes logs["test"]["score"] = SCORES[epoch], as a recorder would."""

    priority = HIGH

    def on_test_end(self, logs):
        logs["test"]["score"] = SCORES[logs["epoch"]]


def test_the_trainer_stops_after_the_epoch_it_was_told(tmp_path):
    trainer = ClassifierTrainer(cfg(num_epochs=10, test_size=16, train_size=32,
                                    callbacks=lambda: [ScriptedScore(), EarlyStopping("score", patience=3)]))
    logs = trainer.run()
    assert logs["epoch"] == 4


def test_a_resumed_run_stops_where_an_uninterrupted_one_does(tmp_path):
    def callbacks():
        return [ScriptedScore(), EarlyStopping("score", patience=3), ModelCheckpoint(model_dir=str(tmp_path))]

    ClassifierTrainer(cfg(num_epochs=3, test_size=16, train_size=32, callbacks=callbacks)).run()
    logs = ClassifierTrainer(cfg(num_epochs=10, test_size=16, train_size=32, resume="auto", callbacks=callbacks)).run()
    assert logs["epoch"] == 4
