"""LoggerFanOut through LogHistory: a logger that fails is named in one line and dropped while training and the
other loggers go on; the loggers are closed once, after the checkpoints, with EndLoggers listed or not.

Each run trains 2 epochs of 6 batches, a log line every 2 batches.
"""
import logging

import pytest

from basetrainer.callbacks.log_history import EndLoggers, LogHistory
from basetrainer.callbacks.losses_recorder import LossesRecorder
from basetrainer.callbacks.model_checkpoint import ModelCheckpoint
from basetrainer.loggers.base import Logger
from basetrainer.loggers.fanout import LoggerFanOut
from basetrainer.utils.log import get_logger
from support.workers.metrics_worker import ClassifierTrainer, cfg


class Calls(Logger):
    """Keeps the name of every call it gets; ``fails_at`` names the call (and its count) it raises at."""

    def __init__(self, name, fails_at=None, times=1, error=None):
        self.name, self.calls = name, []
        self.fails_at, self.times = fails_at, times
        self.error = error or ConnectionError("tracking server at http://127.0.0.1:9 went away")
        self.run_id = f"{name}-run"

    def _call(self, call):
        self.calls.append(call)
        if call == self.fails_at and self.calls.count(call) == self.times:
            raise self.error

    def start(self, history, resumed, step):
        self._call("start")

    def log_params(self, params):
        self._call("log_params")

    def log_metrics(self, scalars, step):
        self._call("log_metrics")

    def log_epoch(self, record, step):
        self._call("log_epoch")

    def log_artifact(self, path):
        self._call(f"log_artifact {path.rsplit('/', 1)[-1]}")

    def close(self, failed=False):
        self._call("close")

    def state_dict(self):
        return {"run_id": self.run_id}


class ErrorLines(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture
def errors():
    handler = ErrorLines()
    get_logger().addHandler(handler)
    yield handler.lines
    get_logger().removeHandler(handler)


def train(tmp_path, loggers, end_loggers=False):
    def callbacks():
        history = LogHistory(tmp_path / "log", log_freq=2, loggers=loggers, plot=False,
                             artifacts=[tmp_path / "model" / "model_final.pth"])
        return [LossesRecorder(), history, ModelCheckpoint(model_dir=str(tmp_path / "model")),
                *([EndLoggers(history)] if end_loggers else [])]

    trainer = ClassifierTrainer(cfg(num_epochs=2, callbacks=callbacks))
    trainer.run()
    return trainer


# per epoch: 3 step lines and the epoch record; at the end the run's whole-run and steady-state rates, the files
EVERY_CALL = ["start", "log_params", *(["log_metrics"] * 3 + ["log_epoch"]) * 2, "log_metrics",
              "log_artifact model_final.pth", "close"]


def test_a_logger_that_fails_at_start_is_dropped_in_one_line_and_training_goes_on(tmp_path, errors):
    failing, healthy = Calls("wandb", fails_at="start"), Calls("csv")
    trainer = train(tmp_path, [failing, healthy])
    assert trainer.state.epoch == 1 and (tmp_path / "model" / "model_final.pth").is_file()
    assert failing.calls == ["start"] and healthy.calls == EVERY_CALL
    assert errors == [("logger wandb failed in start and is dropped, training goes on without it: ConnectionError: "
                       "tracking server at http://127.0.0.1:9 went away")]


def test_a_logger_that_fails_in_the_middle_of_a_run_is_not_called_again(tmp_path, errors):
    failing, healthy = Calls("mlflow", fails_at="log_metrics", times=2), Calls("csv")
    train(tmp_path, [failing, healthy])
    assert failing.calls == ["start", "log_params", "log_metrics", "log_metrics"]
    assert healthy.calls == EVERY_CALL and len(errors) == 1


def test_a_multi_line_library_error_is_reported_on_one_line(tmp_path, errors):
    error = RuntimeError("API request failed\nTraceback (most recent call last):\n  File ...\nRuntimeError: 503")
    train(tmp_path, [Calls("mlflow", fails_at="log_epoch", error=error)])
    assert len(errors) == 1 and "\n" not in errors[0]


def test_a_dropped_logger_keeps_its_state_in_the_checkpoint():
    fanout = LoggerFanOut([Calls("mlflow", fails_at="start"), Calls("csv")])
    fanout.start([], False, 0)
    assert [logger.name for logger in fanout.active] == ["csv"]
    assert fanout.state_dict() == {"mlflow": {"run_id": "mlflow-run"}, "csv": {"run_id": "csv-run"}}


def test_the_loggers_get_the_final_weights_and_are_closed_once_after_the_checkpoints(tmp_path):
    logger = Calls("recorder")
    train(tmp_path, [logger])
    assert logger.calls[-2:] == ["log_artifact model_final.pth", "close"]


def test_an_end_loggers_still_listed_changes_nothing_and_says_it_is_no_longer_needed(tmp_path):
    logger = Calls("recorder")
    with pytest.warns(DeprecationWarning, match="EndLoggers is no longer needed"):
        train(tmp_path, [logger], end_loggers=True)
    assert logger.calls == EVERY_CALL


def test_a_full_disk_stops_the_run_in_one_line_instead_of_dropping_the_logger(tmp_path):
    from basetrainer.errors import DiskFullError
    from basetrainer.loggers.history import HistoryLogger
    from support.full_disk import fill, small_filesystem

    with small_filesystem(tmp_path / "disk", "1m") as disk:
        fan_out = LoggerFanOut([HistoryLogger(disk)])
        fan_out.start([], resumed=False, step=0)
        fill(disk)
        with pytest.raises(DiskFullError, match=r"could not write .*history\.csv: no space left on device"):
            fan_out.log_epoch({"epoch": 1, "lr": 0.1, "train": {"loss": 0.9}, "test": {"Acc": 80.0}}, step=9)
        assert len(fan_out.active) == 1
