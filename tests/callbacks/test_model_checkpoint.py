"""ModelCheckpoint's best models when the evaluation publishes no value of its indicator: a run that evaluates
without it is told which recorder is missing; a run that does not evaluate (no test set) is told nothing."""
import logging

import torch.nn as nn

from basetrainer.callbacks.model_checkpoint import ModelCheckpoint


def epoch_ends(tmp_path, caplog, logs) -> list:
    checkpointer = ModelCheckpoint(model_dir=str(tmp_path), indicator="Acc")
    checkpointer.model = nn.Linear(2, 2)
    with caplog.at_level(logging.WARNING):
        checkpointer.on_epoch_end(0, logs)
        checkpointer.on_epoch_end(1, logs)
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith("best_model_")] == []
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]


def test_an_evaluation_without_the_indicator_warns_once_to_add_its_recorder(tmp_path, caplog):
    warnings = epoch_ends(tmp_path, caplog, {"train": {"loss": 1.0}, "test": {"loss": 0.5}})
    assert len(warnings) == 1 and "has no 'Acc'" in warnings[0] and "add the recorder" in warnings[0]


def test_a_run_without_evaluation_keeps_no_best_model_and_warns_nothing(tmp_path, caplog):
    assert epoch_ends(tmp_path, caplog, {"train": {"loss": 1.0}}) == []
    assert epoch_ends(tmp_path, caplog, {"train": {"loss": 1.0}, "test": {}}) == []
