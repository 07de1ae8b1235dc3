"""Each logger read back with its own library: TensorBoard events, history.csv/.jsonl, MLflow (a SQLite
store, through MlflowClient), W&B (offline run files, through wandb's reader); a resumed run continuing the
same MLflow and W&B run; rank 0 alone logging under 2 processes; build_loggers' one-line errors.

The tracked runs train 2 epochs of 6 batches (96 samples in batches of 16), a log line every 2 batches.
"""
import csv
import glob
import json
import os
import sys

import pytest
import torch

from basetrainer.callbacks.log_history import LogHistory
from basetrainer.callbacks.losses_recorder import LossesRecorder
from basetrainer.callbacks.model_checkpoint import ModelCheckpoint
from basetrainer.errors import ConfigError
from basetrainer.loggers import build_loggers
from basetrainer.loggers.base import Logger, epoch_scalars
from basetrainer.loggers.history import HistoryLogger
from basetrainer.loggers.tensorboard import TensorBoardLogger
from basetrainer.metric.accuracy_recorder import AccuracyRecorder
from support import WORKERS
from support.processes import run_python
from support.workers.metrics_worker import ClassifierTrainer, cfg

WORKER = str(WORKERS / "loggers_worker.py")
STEPS = 6
ARTIFACTS = {"training_curves.png", "confusion_matrix.png", "model_final.pth"}


class Recorder(Logger):
    """Keeps what LogHistory hands its loggers: what every other logger must hold."""

    name = "recorder"

    def __init__(self):
        self.params, self.metrics, self.artifacts = None, {}, []

    def log_params(self, params):
        self.params = params

    def log_metrics(self, scalars, step):
        for key, value in scalars.items():
            self.metrics.setdefault(key, []).append((step, value))

    def log_epoch(self, record, step):
        self.log_metrics(epoch_scalars(record), step)

    def log_artifact(self, path):
        self.artifacts.append(os.path.basename(path))


def train(work_dir, names, num_epochs=2, resume=None, recorder=None, **config):
    """Trains with the named loggers (and ``recorder``) under ``work_dir``: log/ and model/; returns the trainer.
    ``config``: more keys of the config the loggers are built from."""
    log_dir, model_dir = work_dir / "log", work_dir / "model"

    def callbacks():
        loggers = build_loggers(names, str(log_dir), {"work_dir": str(work_dir), **config}, indicators=["loss", "Acc"])
        history = LogHistory(str(log_dir), log_freq=2, loggers=[*loggers, *([recorder] if recorder else [])],
                             artifacts=[log_dir / "confusion_matrix.png", model_dir / "model_final.pth"])
        return [LossesRecorder(), AccuracyRecorder(log_dir=str(log_dir)), history,
                ModelCheckpoint(model_dir=str(model_dir))]

    trainer = ClassifierTrainer(cfg(num_epochs=num_epochs, resume=resume, callbacks=callbacks))
    trainer.run()
    return trainer


@pytest.fixture(autouse=True)
def offline_trackers(tmp_path, monkeypatch):
    """No tracker reaches a server: MLflow uses the run's local store, W&B stays offline under tmp_path."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    monkeypatch.setenv("WANDB_SILENT", "true")


# ---------------------------------------------------------------------- TensorBoard
def tensorboard_scalars(log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


RECORD = {"epoch": 1, "lr": 0.5, "train": {"loss": {"cls": 0.25, "box": 0.125}}, "test": {"Acc": 75.0}}


def test_tensorboard_holds_step_scalars_and_epoch_records_at_their_steps(tmp_path):
    logger = TensorBoardLogger(tmp_path)
    logger.start([], False, None)
    logger.log_metrics({"train/loss_step": 0.5, "train/lr": 0.25}, 1)
    logger.log_epoch(RECORD, 5)
    logger.close()
    assert tensorboard_scalars(tmp_path) == {"train/loss_step": [(1, 0.5)], "train/lr": [(1, 0.25)],
                                             "train/loss/cls": [(5, 0.25)], "train/loss/box": [(5, 0.125)],
                                             "test/Acc": [(5, 75.0)], "lr": [(5, 0.5)]}


def test_tensorboard_holds_text_at_its_step_in_its_text_tab(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = TensorBoardLogger(tmp_path)
    logger.start([], False, None)
    logger.log_metrics({"train/loss_step": 0.5}, 1)
    logger.log_text("completions", "'Greet Ann.' -> 'Hello, Ann!'", 3)
    logger.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    [event] = events.Tensors("completions/text_summary")
    assert event.step == 3
    assert event.tensor_proto.string_val[0].decode() == "```\n'Greet Ann.' -> 'Hello, Ann!'\n```"


@pytest.mark.slow  # MLflow's store starts a process
def test_mlflow_holds_text_as_a_file_per_step(tmp_path):
    pytest.importorskip("mlflow")
    from basetrainer.loggers.mlflow import MLflowLogger

    logger = MLflowLogger(work_dir=str(tmp_path))
    logger.start([], False, None)
    logger.log_text("completions", "'Greet Ann.' -> 'Hello, Ann!'", 7)
    logger.close()
    client = mlflow_client(tmp_path)
    text = client.download_artifacts(only_run(client).info.run_id, "completions/step_000000007.txt", str(tmp_path))
    assert open(text, encoding="utf-8").read() == "'Greet Ann.' -> 'Hello, Ann!'"


def test_a_resumed_tensorboard_hides_the_steps_it_runs_again(tmp_path):
    first = TensorBoardLogger(tmp_path)
    first.start([], False, None)
    for step in (1, 3, 5):
        first.log_metrics({"train/loss_step": float(step)}, step)
    first.close()
    resumed = TensorBoardLogger(tmp_path)
    resumed.start([], True, 3)
    resumed.log_metrics({"train/loss_step": 30.0}, 3)
    resumed.close()
    assert tensorboard_scalars(tmp_path)["train/loss_step"] == [(1, 1.0), (3, 30.0)]


# ---------------------------------------------------------------------- history.csv and history.jsonl
def read_history(log_dir):
    with open(log_dir / "history.csv", newline="") as stream:
        table = list(csv.reader(stream))
    records = [json.loads(line) for line in (log_dir / "history.jsonl").read_text().splitlines()]
    return table, records


def test_history_files_hold_a_row_and_a_record_per_epoch(tmp_path):
    second = {**RECORD, "epoch": 2, "test": {"Acc": 80.0}}
    logger = HistoryLogger(tmp_path)
    logger.start([], False, None)
    logger.log_epoch(RECORD, 5)
    logger.log_epoch(second, 11)
    table, records = read_history(tmp_path)
    assert table == [["epoch", "lr", "train_loss/cls", "train_loss/box", "test_Acc"],
                     ["1", "0.5", "0.25", "0.125", "75.0"], ["2", "0.5", "0.25", "0.125", "80.0"]]
    assert records == [RECORD, second]


def test_a_resumed_history_keeps_the_epochs_before_the_resume_and_a_fresh_one_none(tmp_path):
    logger = HistoryLogger(tmp_path)
    logger.start([], False, None)
    for epoch in (1, 2):
        logger.log_epoch({**RECORD, "epoch": epoch}, 6 * epoch - 1)
    HistoryLogger(tmp_path).start([RECORD], True, 6)
    table, records = read_history(tmp_path)
    assert [row[0] for row in table[1:]] == ["1"] and records == [RECORD]
    HistoryLogger(tmp_path).start([], False, None)
    assert not (tmp_path / "history.csv").exists() and not (tmp_path / "history.jsonl").exists()


# ---------------------------------------------------------------------- MLflow
@pytest.fixture(scope="module")
def mlflow_run(tmp_path_factory):
    pytest.importorskip("mlflow")
    work_dir = tmp_path_factory.mktemp("mlflow") / "work"
    recorder = Recorder()
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        train(work_dir, ["mlflow"], recorder=recorder)
    return work_dir, recorder


def mlflow_client(work_dir):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{work_dir / 'mlflow.db'}")


def only_run(client):
    experiment = client.get_experiment_by_name("basetrainer")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1
    return runs[0]


def test_mlflow_holds_every_metrics_full_history(mlflow_run):
    work_dir, recorder = mlflow_run
    client = mlflow_client(work_dir)
    run = only_run(client)
    assert set(run.data.metrics) == set(recorder.metrics)
    for key, expected in recorder.metrics.items():
        history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        assert history == expected, key
    assert [step for step, _ in recorder.metrics["test/Acc"]] == [STEPS - 1, 2 * STEPS - 1]
    assert [step for step, _ in recorder.metrics["train/loss_step"]] == list(range(1, 2 * STEPS, 2))


def test_mlflow_params_are_the_flattened_config(mlflow_run):
    work_dir, recorder = mlflow_run
    params = only_run(mlflow_client(work_dir)).data.params
    assert params == recorder.params
    assert params["num_epochs"] == "2" and params["seed"] == "5"


def test_mlflow_artifacts_are_the_pictures_and_the_final_weights_under_the_work_dir(mlflow_run):
    work_dir, recorder = mlflow_run
    client = mlflow_client(work_dir)
    run = only_run(client)
    assert {artifact.path for artifact in client.list_artifacts(run.info.run_id)} == ARTIFACTS
    assert set(recorder.artifacts) == ARTIFACTS
    stored = glob.glob(str(work_dir / "mlartifacts" / "**" / "model_final.pth"), recursive=True)
    assert len(stored) == 1 and open(stored[0], "rb").read() == (work_dir / "model" / "model_final.pth").read_bytes()
    assert run.info.status == "FINISHED"


@pytest.mark.slow  # MLflow starts a process
def test_a_resumed_run_continues_the_same_mlflow_run(tmp_path):
    pytest.importorskip("mlflow")
    train(tmp_path, ["mlflow"], num_epochs=1)
    saved = torch.load(tmp_path / "model" / "last.pth", weights_only=False)
    run_id = next(state for key, state in saved["callbacks"].items() if key.endswith("LogHistory"))["loggers"]
    train(tmp_path, ["mlflow"], num_epochs=2, resume="auto")
    client = mlflow_client(tmp_path)
    run = only_run(client)
    assert run.info.run_id == run_id["mlflow"]["run_id"] and run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "test/Acc")
    assert sorted(m.step for m in history) == [STEPS - 1, 2 * STEPS - 1]


# ---------------------------------------------------------------------- W&B
def wandb_records(run_dir):
    """The records of an offline run's .wandb file, as wandb's own reader prints them."""
    result = run_python(["-m", "wandb", "leet", "inspect", "--json", run_dir], timeout=60)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def wandb_history(records):
    metrics = {}
    for record in records:
        if record["type"] == "history":
            row = record["history"]
            for key, value in row["item"].items():
                if not key.startswith("_"):
                    metrics.setdefault(key, []).append((int(row["step"]["num"]), value))
    return metrics


def offline_runs(tmp_path):
    return sorted(glob.glob(str(tmp_path / "wandb" / "wandb" / "offline-run-*")))


@pytest.fixture(scope="module")
def wandb_run(tmp_path_factory):
    pytest.importorskip("wandb")
    root = tmp_path_factory.mktemp("wandb")
    recorder = Recorder()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_MODE", "offline")
        patch.setenv("WANDB_DIR", str(root / "wandb"))
        patch.setenv("WANDB_SILENT", "true")
        train(root / "work", ["wandb"], recorder=recorder)
    (run_dir,) = offline_runs(root)
    return run_dir, wandb_records(run_dir), recorder


def test_wandb_history_holds_every_metric_at_its_step(wandb_run):
    _, records, recorder = wandb_run
    assert wandb_history(records) == recorder.metrics


def test_wandb_config_is_the_flattened_config(wandb_run):
    _, records, recorder = wandb_run
    config = {}
    for record in records:
        if record["type"] == "config":
            config.update(record["config"].get("update", {}))
    assert {key: config[key] for key in recorder.params} == recorder.params


def test_wandb_files_are_the_pictures_and_the_final_weights(wandb_run):
    run_dir, records, _ = wandb_run
    saved = {file["path"] for record in records if record["type"] == "files" for file in record["files"]["files"]}
    assert ARTIFACTS <= saved
    assert ARTIFACTS <= set(os.listdir(os.path.join(run_dir, "files")))
    assert [record["exit"].get("exit_code", 0) for record in records if record["type"] == "exit"] == [0]


@pytest.mark.slow
def test_a_resumed_run_continues_the_same_wandb_run(tmp_path):
    pytest.importorskip("wandb")
    train(tmp_path / "work", ["wandb"], num_epochs=1)
    train(tmp_path / "work", ["wandb"], num_epochs=2, resume="auto")
    first, resumed = (wandb_records(run_dir) for run_dir in offline_runs(tmp_path))
    run_ids = [next(r["run"]["run_id"] for r in records if r["type"] == "run") for records in (first, resumed)]
    assert run_ids[0] == run_ids[1]
    assert [step for step, _ in wandb_history(resumed)["test/Acc"]] == [2 * STEPS - 1]


@pytest.mark.slow
def test_wandb_mode_offline_in_the_config_keeps_the_run_on_this_machine(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no login here: an online run could not start
    train(tmp_path / "work", ["wandb"], num_epochs=1, wandb_mode="offline")
    (run_dir,) = offline_runs(tmp_path)
    assert [step for step, _ in wandb_history(wandb_records(run_dir))["test/Acc"]] == [STEPS - 1]


# ---------------------------------------------------------------------- 2 processes
@pytest.mark.slow
def test_only_rank_0_logs_under_two_processes(tmp_path):
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    env = {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path / "wandb"), "WANDB_SILENT": "true"}
    result = run_python([WORKER, tmp_path / "out"], env=env, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    out = tmp_path / "out"
    assert [row[0] for row in read_history(out)[0][1:]] == ["1", "2"]
    assert len(glob.glob(str(out / "events.out.tfevents.*"))) == 1
    run = only_run(mlflow_client(out))
    assert [m.step for m in mlflow_client(out).get_metric_history(run.info.run_id, "test/loss")] == [STEPS - 1, 2 * STEPS - 1]
    assert len(offline_runs(tmp_path)) == 1


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize("name", ["mlflow", "wandb"])
def test_a_missing_tracker_package_is_a_one_line_error_naming_the_extra(tmp_path, monkeypatch, name):
    monkeypatch.setitem(sys.modules, name, None)  # as if it were not installed
    with pytest.raises(ConfigError) as error:
        build_loggers([name], str(tmp_path))
    assert str(error.value) == f'the {name} logger needs the {name} package: pip install "basetrainer[{name}]"'


def test_an_unknown_logger_name_is_a_one_line_error(tmp_path):
    with pytest.raises(ConfigError, match="unknown logger 'mlfow'; choose from tensorboard, csv, mlflow, wandb"):
        build_loggers(["tensorboard", "mlfow"], str(tmp_path))
