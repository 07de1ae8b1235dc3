"""torchmetrics metrics: named in a config, refused before any work when they cannot be made or fed, and
published by MetricsRecorder as torchmetrics computes them, the same from 2 processes as from one."""
import csv
import importlib.util
import logging
import os
import signal

import pytest
import torch
from torchmetrics import classification

from basetrainer.callbacks.early_stopping import EarlyStopping
from basetrainer.callbacks.log_history import LogHistory
from basetrainer.callbacks.model_checkpoint import ModelCheckpoint
from basetrainer.engine.events import Callback
from basetrainer.errors import ConfigError, TrainingInterrupted
from basetrainer.loggers.base import flatten
from basetrainer.metric.metric_specs import build_metric, metric_spec, metric_specs
from basetrainer.metric.metrics_recorder import MetricsRecorder
from basetrainer.tasks import classification as task
from basetrainer.utils.log import get_logger
from support import WORKERS
from support.images import write_class_images
from support.processes import run_python
from support.toy import ToyTrainer, blobs, toy_cfg
from support.workers.torchmetrics_worker import CLASSES, SYNCED_BY_TORCHMETRICS, TEST_SIZES
from support.workers.torchmetrics_worker import evaluate as evaluate_in_one_process

WORKER = str(WORKERS / "torchmetrics_worker.py")


def evaluated(metrics, test_size=64, **recorder_options):
    """``logs["test"]`` of the toy trainer's evaluation (untrained: 4 classes, 64 test samples in batches of 16),
    and the recorder."""
    recorder = MetricsRecorder(metrics, num_classes=CLASSES, **recorder_options)
    return ToyTrainer(toy_cfg(test_size=test_size, callbacks=[recorder])).evaluate(), recorder


def toy_test_set():
    """The toy trainer's untrained logits and targets on its 64 test samples."""
    trainer = ToyTrainer(toy_cfg())
    x, y = blobs(64, seed=1).tensors
    with torch.no_grad():
        return trainer.model.eval()(x), y


# ---------------------------------------------------------------------- names and arguments
def test_a_metric_is_named_by_its_class_alone_or_with_its_arguments():
    specs = metric_specs(["MulticlassAccuracy", {"MulticlassF1Score": {"average": "macro"}}])
    assert [(spec.name, spec.arguments, spec.key) for spec in specs] == [
        ("MulticlassAccuracy", {}, "MulticlassAccuracy"),
        ("MulticlassF1Score", {"average": "macro"}, "MulticlassF1Score")]


def test_num_classes_is_filled_in_where_the_metric_takes_it_and_the_config_leaves_it_out():
    assert build_metric(metric_spec("MulticlassAUROC"), num_classes=7).num_classes == 7
    assert build_metric(metric_spec({"MulticlassAUROC": {"num_classes": 3}}), num_classes=7).num_classes == 3
    assert not hasattr(build_metric(metric_spec("MeanSquaredError"), num_classes=7), "num_classes")


def test_an_unknown_metric_is_refused_naming_the_close_matches():
    with pytest.raises(ConfigError, match=r"unknown torchmetrics metric 'MulticlasF1Score'; did you mean "
                                          r"MulticlassF1Score"):
        metric_spec("MulticlasF1Score")


def test_an_argument_the_metric_does_not_take_is_refused_naming_the_close_one():
    with pytest.raises(ConfigError, match="metric MulticlassF1Score takes no argument 'averag'; did you mean average"):
        metric_spec({"MulticlassF1Score": {"averag": "macro"}})


def test_how_states_sync_is_the_recorders_and_not_an_argument():
    with pytest.raises(ConfigError, match="no argument 'sync_on_compute' .the recorder decides how states sync"):
        metric_spec({"MulticlassAccuracy": {"sync_on_compute": False}})


def test_an_argument_value_the_metric_refuses_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^metric MulticlassF1Score: Expected argument `average` to be one of"):
        MetricsRecorder([{"MulticlassF1Score": {"average": "sometimes"}}], num_classes=CLASSES)


def test_the_same_metric_twice_is_refused():
    with pytest.raises(ConfigError, match="metric MulticlassAccuracy is listed twice"):
        metric_specs(["MulticlassAccuracy", {"MulticlassAccuracy": {"average": "micro"}}])


@pytest.mark.parametrize("metric", ["BinaryAccuracy", "MeanSquaredError", {"MulticlassAccuracy": {"num_classes": 3}}])
def test_a_metric_the_logits_cannot_feed_is_refused_when_the_recorder_is_made(metric):
    with pytest.raises(ConfigError, match=r"cannot be computed from the model's outputs, logits of 4 classes with "
                                          r"integer class targets: \S"):
        MetricsRecorder([metric], num_classes=CLASSES)


def test_a_metric_whose_value_is_no_number_per_class_is_refused():
    with pytest.raises(ConfigError, match=r"MulticlassConfusionMatrix gives a tensor of shape \(4, 4\)"):
        MetricsRecorder(["MulticlassConfusionMatrix"], num_classes=CLASSES)


# ---------------------------------------------------------------------- the recorder
def test_the_recorder_publishes_what_torchmetrics_computes_on_the_whole_test_set():
    metrics = ["MulticlassAccuracy", {"MulticlassF1Score": {"average": "macro"}}, "MulticlassAUROC"]
    results, _ = evaluated(metrics)
    logits, targets = toy_test_set()
    expected = {name: float(getattr(classification, name)(num_classes=CLASSES)(logits, targets))
                for name in ("MulticlassAccuracy", "MulticlassF1Score", "MulticlassAUROC")}
    assert results == pytest.approx(expected, rel=1e-6)


def test_per_class_values_are_a_group_named_by_the_classes_and_published_in_advance():
    recorder = MetricsRecorder([{"MulticlassRecall": {"average": "none"}}], num_classes=CLASSES,
                               target_names=["a", "b", "c", "d"])
    assert recorder.publishes() == ("MulticlassRecall/a", "MulticlassRecall/b", "MulticlassRecall/c",
                                    "MulticlassRecall/d")
    results = ToyTrainer(toy_cfg(callbacks=[recorder])).evaluate()
    logits, targets = toy_test_set()
    per_class = classification.MulticlassRecall(num_classes=CLASSES, average="none")(logits, targets).tolist()
    assert results["MulticlassRecall"] == pytest.approx(dict(zip("abcd", per_class)), rel=1e-6)


def test_a_dict_names_the_metrics_and_takes_metrics_already_made():
    results, _ = evaluated({"top2": classification.MulticlassAccuracy(num_classes=CLASSES, top_k=2),
                            "f1": {"MulticlassF1Score": {"average": "micro"}}})
    assert set(results) == {"top2", "f1"} and results["top2"] >= results["f1"]


def test_the_test_batches_are_folded_into_one_update_every_fold_every_batches():
    _, recorder = evaluated(["MulticlassAccuracy"], test_size=160, fold_every=4)  # 10 batches: 4 + 4 + 2
    assert recorder.metrics["MulticlassAccuracy"].update_count == 3


def test_metrics_built_by_name_update_without_per_batch_checks_once_the_logits_were_tried():
    recorder = MetricsRecorder(["MulticlassAccuracy", {"MulticlassAUROC": {"validate_args": True}}],
                               num_classes=CLASSES)
    assert recorder.metrics["MulticlassAccuracy"].validate_args is False
    assert recorder.metrics["MulticlassAUROC"].validate_args is True


def test_each_evaluation_starts_afresh():
    recorder = MetricsRecorder(["MulticlassAccuracy"], num_classes=CLASSES)
    trainer = ToyTrainer(toy_cfg(callbacks=[recorder]))
    assert trainer.evaluate() == trainer.evaluate()


def test_the_main_process_logs_the_values_once_per_evaluation_and_nothing_of_one_cut_short(tmp_path, monkeypatch):
    class SignalAtSecondTestBatch(Callback):
        def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
            if batch == 1:
                os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.chdir(tmp_path)  # where the stopped run saves
    lines, handler = [], logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    get_logger().addHandler(handler)  # conftest's restore_basetrainer_logger puts the logger back after the test
    get_logger().setLevel(logging.INFO)
    recorder = MetricsRecorder(["MulticlassAccuracy"], num_classes=CLASSES)
    with pytest.raises(TrainingInterrupted):
        ToyTrainer(toy_cfg(num_epochs=1, callbacks=[recorder, SignalAtSecondTestBatch()])).run()
    assert not any(line.startswith("test MulticlassAccuracy") for line in lines)
    ToyTrainer(toy_cfg(num_epochs=2, callbacks=[recorder])).run()
    assert [line.split()[:2] + line.split()[3:] for line in lines if line.startswith("test Multiclass")] == [
        ["test", "MulticlassAccuracy", "(epoch", "1)"], ["test", "MulticlassAccuracy", "(epoch", "2)"]]


def test_a_run_logs_the_metrics_in_the_history_and_early_stopping_and_the_best_model_read_one(tmp_path):
    recorder = MetricsRecorder(["MulticlassAccuracy", "MulticlassAUROC"], num_classes=CLASSES)
    stopping = EarlyStopping("MulticlassAUROC", patience=100)
    history = LogHistory(tmp_path, indicators=["loss", "MulticlassAccuracy", "MulticlassAUROC"], tensorboard=False,
                         plot=False)
    best = ModelCheckpoint(model_dir=tmp_path / "model", indicator="MulticlassAUROC", save_best_k=1)
    ToyTrainer(toy_cfg(num_epochs=3, callbacks=[recorder, stopping, history, best])).run()
    with open(tmp_path / "history.csv", newline="") as stream:
        rows = list(csv.DictReader(stream))
    aurocs = [float(row["test_MulticlassAUROC"]) for row in rows]
    assert len(aurocs) == 3 and all(0 < value <= 1 for value in aurocs)
    assert stopping.best == max(aurocs)
    [kept] = (tmp_path / "model").glob("best_model_*.pth")
    assert torch.load(kept, weights_only=True)["MulticlassAUROC"] == max(aurocs)


def test_a_target_naming_a_metric_is_checked_against_what_the_recorder_publishes():
    def trainer(metric):
        recorder = MetricsRecorder(["MulticlassAccuracy"], num_classes=CLASSES)
        return ToyTrainer(toy_cfg(callbacks=[recorder], target={"metric": metric, "value": 2.0, "mode": "max",
                                                                "stop": False}))

    assert trainer("test/MulticlassAccuracy")
    with pytest.raises(ConfigError, match="no callback publishes the metric 'test/F1'.* MulticlassAccuracy"):
        trainer("test/F1")


# ---------------------------------------------------------------------- the classification task
def test_the_tasks_metrics_are_checked_with_the_config():
    with pytest.raises(ConfigError, match=r"^config key 'metrics': item 1: unknown torchmetrics metric 'AUROCC'; "
                                          r"did you mean AUROC"):
        task.parse_config(["metrics=[MulticlassAccuracy, AUROCC]"])
    cfg = task.parse_config(["metrics=[multiclassaccuracy, {MulticlassF1Score: {average: macro}}]"])
    assert MetricsRecorder(cfg.metrics, num_classes=CLASSES).publishes() == ("MulticlassAccuracy", "MulticlassF1Score")
    one = task.parse_config(["metrics=MulticlassAUROC"])  # one name alone is a list of it
    assert MetricsRecorder(one.metrics, num_classes=CLASSES).publishes() == ("MulticlassAUROC",)


def test_the_task_refuses_metrics_its_logits_cannot_feed_before_any_process_starts(tmp_path):
    for name in ("cat", "dog", "bird"):
        (tmp_path / "data" / name).mkdir(parents=True)
    data = str(tmp_path / "data")
    cfg = task.parse_config([f"train_data={data}", f"test_data={data}", f"work_dir={tmp_path / 'work'}",
                             "metrics=[BinaryAccuracy]"])
    with pytest.raises(ConfigError, match=r"^config key 'metrics': metric BinaryAccuracy cannot be computed from the "
                                          r"model's outputs, logits of 3 classes"):
        task.train(cfg)
    assert not (tmp_path / "work").exists()


def test_the_task_picks_its_best_models_and_stops_early_by_the_monitored_metric(tmp_path):
    write_class_images(str(tmp_path / "data"), ["cat", "dog", "bird"], per_class=2)
    common = [f"train_data={tmp_path / 'data'}", f"test_data={tmp_path / 'data'}", "input_size=[16, 16]",
              "net_type=resnet18", "batch_size=2", "early_stopping_patience=2"]
    for options, monitored in ((["metrics=[MulticlassF1Score]", "monitor=MulticlassF1Score"], ("MulticlassF1Score", "max")),
                               (["monitor=loss"], ("loss", "min")), ([], ("Acc", "max"))):
        trainer = task.ClassificationTrainer(task.parse_config([*common, f"work_dir={tmp_path / 'work'}", *options]))
        watching = [callback for callback in trainer.callbacks if isinstance(callback, (ModelCheckpoint, EarlyStopping))]
        assert [(callback.indicator, callback.mode) for callback in watching] == [monitored, monitored]


def test_a_monitor_no_evaluation_publishes_is_refused_with_the_config_naming_what_is_published():
    with pytest.raises(ConfigError, match=r"^monitor 'MulticlassF1Score' \(.*\), metrics \['MulticlassAUROC'\] \(.*\): "
                                          r"the evaluations publish Acc, loss, MulticlassAUROC; set monitor to one"):
        task.parse_config(["metrics=[MulticlassAUROC]", "monitor=MulticlassF1Score"])


def test_without_torchmetrics_the_default_config_works_and_metrics_name_the_pip_command(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "torchmetrics" else find_spec(name, *args))
    assert task.parse_config([]).metrics == []
    with pytest.raises(ConfigError, match=r"config key 'metrics': item 0: metrics need the torchmetrics package: "
                                          r'pip install "basetrainer\[metrics\]"'):
        task.parse_config(["metrics=[MulticlassAccuracy]"])


# ---------------------------------------------------------------------- 2 processes
@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    """One 2-process launch of the worker: the recorder's values for every test set, and torchmetrics' own sync's."""
    out = tmp_path_factory.mktemp("torchmetrics")
    result = run_python([WORKER, out], timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    return torch.load(out / "results.pt", weights_only=True)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:No (positive|negative) samples:UserWarning")  # of one sample: as expected
@pytest.mark.filterwarnings("ignore:Average precision score for one or more classes was `nan`:UserWarning")
@pytest.mark.parametrize("test_size", TEST_SIZES)
def test_every_metric_from_2_processes_equals_1_process_on_the_same_data(two_processes, test_size):
    """101 samples: uneven shards of 51 and 50 (batches of 16); 1 sample: one rank sees none. Float32 sums
    added in another order may differ in the last bit."""
    expected = flatten(evaluate_in_one_process(test_size))
    assert flatten(two_processes["recorder"][test_size]) == pytest.approx(expected, rel=1e-6)
    assert len(expected) == 7 + CLASSES


@pytest.mark.slow
def test_the_classification_task_imports_no_torchmetrics_until_a_metric_is_named(two_processes):
    assert two_processes["task imports torchmetrics"] is False


@pytest.mark.slow
def test_torchmetrics_own_sync_gathers_uneven_shards_exactly(two_processes):
    one_process = evaluate_in_one_process(TEST_SIZES[0])
    assert two_processes["torchmetrics"] == pytest.approx({name: one_process[name] for name in SYNCED_BY_TORCHMETRICS},
                                                          rel=1e-6)
