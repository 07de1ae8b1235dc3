"""Confusion matrix, per-class report, AccuracyRecorder and MultiLossesRecorder; their values under 2 processes."""
import csv
import logging
import os
import signal

import pytest
import torch

from basetrainer.callbacks.multi_losses_recorder import MultiLossesRecorder
from basetrainer.engine.events import Callback
from basetrainer.errors import TrainingInterrupted
from basetrainer.metric.accuracy_recorder import AccuracyRecorder
from basetrainer.metric.classification_report import confusion_matrix, format_report, precision_recall_f1
from basetrainer.utils.log import get_logger
from support import WORKERS
from support.processes import run_python
from support.toy import ToyTrainer, toy_cfg
from support.workers.metrics_worker import CLASSES, ClassifierTrainer, blobs, cfg, make_model

WORKER = str(WORKERS / "metrics_worker.py")

# Seven predictions with a hand-counted confusion matrix (rows: true class, columns: predicted).
TARGETS = torch.tensor([0, 0, 1, 1, 2, 2, 2])
PREDS = torch.tensor([0, 1, 1, 1, 2, 0, 2])
MATRIX = [[1, 1, 0],
          [0, 2, 0],
          [1, 0, 2]]


def logits_for(preds, num_classes=3, second=None):
    """Logits whose argmax is ``preds`` (and whose second choice is ``second``, if given)."""
    logits = torch.zeros(len(preds), num_classes)
    logits[torch.arange(len(preds)), preds] = 2.0
    if second is not None:
        logits[torch.arange(len(preds)), second] = 1.0
    return logits


def feed(recorder, phase, batches):
    """Sends (logits, targets) batches through the recorder as the trainer would; returns logs."""
    logs = {"train": {}, "test": {}, "epoch": 0}
    if phase == "test":
        recorder.on_test_begin(logs)
    for i, (logits, targets) in enumerate(batches):
        summary = recorder.on_test_summary if phase == "test" else recorder.on_train_summary
        summary((torch.zeros(len(targets), 1), targets), logits, None, 0, i, logs)
    if phase == "test":
        recorder.on_test_end(logs)
    else:
        recorder.on_epoch_end(0, logs)
    return logs


# ---------------------------------------------------------------------- confusion matrix and report
def test_confusion_matrix_of_known_predictions():
    assert confusion_matrix(TARGETS, PREDS, 3).tolist() == MATRIX


def test_precision_recall_f1_of_known_matrix():
    scores = precision_recall_f1(torch.tensor(MATRIX))
    assert scores["precision"].tolist() == pytest.approx([1 / 2, 2 / 3, 1.0])
    assert scores["recall"].tolist() == pytest.approx([1 / 2, 1.0, 2 / 3])
    assert scores["f1"].tolist() == pytest.approx([0.5, 0.8, 0.8])
    assert scores["support"].tolist() == [2, 2, 3]


def test_class_never_predicted_nor_present_scores_zero():
    scores = precision_recall_f1(torch.tensor([[3, 0], [0, 0]]))
    assert scores["precision"].tolist() == [1.0, 0.0]
    assert scores["recall"].tolist() == [1.0, 0.0]
    assert scores["f1"].tolist() == [1.0, 0.0]


def test_report_names_each_class_and_gives_the_averages():
    rows = {tuple(line.split()[:2]): line.split() for line in format_report(torch.tensor(MATRIX), CLASSES).splitlines()}
    assert rows["dog", "0.6667"] == ["dog", "0.6667", "1.0000", "0.8000", "2"]
    assert rows["accuracy", "0.7143"] == ["accuracy", "0.7143", "7"]
    assert rows["macro", "avg"] == ["macro", "avg", "0.7222", "0.7222", "0.7000", "7"]


def test_target_outside_the_classes_is_a_clear_error():
    with pytest.raises(ValueError, match="outside 0..2"):
        confusion_matrix(torch.tensor([3]), torch.tensor([0]), 3)


# ---------------------------------------------------------------------- AccuracyRecorder
def test_publishes_top1_accuracy_in_percent():
    logs = feed(AccuracyRecorder(), "test", [(logits_for(PREDS), TARGETS)])
    assert logs["test"]["Acc"] == pytest.approx(100.0 * 5 / 7)


def test_publishes_topk_under_its_own_name():
    second = torch.tensor([1, 0, 0, 0, 0, 2, 0])  # the wrong top-1 predictions have the target second
    logs = feed(AccuracyRecorder(indicator="acc", topk=(1, 2)), "test", [(logits_for(PREDS, second=second), TARGETS)])
    assert logs["test"]["acc"] == pytest.approx(100.0 * 5 / 7)
    assert logs["test"]["acc_top2"] == pytest.approx(100.0)


def test_counts_equal_a_direct_computation_across_fold_boundaries():
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(n, 5, generator=g), torch.randint(0, 5, (n,), generator=g)) for n in [7, 3, 8, 1, 6, 4, 8]]
    recorder = AccuracyRecorder(topk=(1, 3), fold_every=3)
    logs = feed(recorder, "test", batches)
    logits, targets = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    top1 = (logits.argmax(1) == targets).double().mean().item() * 100
    top3 = (logits.topk(3, 1).indices == targets[:, None]).any(1).double().mean().item() * 100
    assert logs["test"]["Acc"] == pytest.approx(top1) and logs["test"]["Acc_top3"] == pytest.approx(top3)
    assert recorder.test_matrix.tolist() == confusion_matrix(targets, logits.argmax(1), 5).tolist()


def test_batches_are_only_referenced_until_a_fold():
    recorder = AccuracyRecorder(fold_every=4)
    for i in range(3):
        recorder.on_train_summary((None, TARGETS), logits_for(PREDS), None, 0, i, {})
    assert recorder.train_tally.pairs is None  # nothing computed yet: no per-step work
    recorder.on_train_summary((None, TARGETS), logits_for(PREDS), None, 0, 3, {})
    assert recorder.train_tally.pairs.sum().item() == 4 * len(TARGETS)


def test_batches_are_folded_sooner_once_they_hold_fold_elements_logits():
    logits = logits_for(PREDS)
    recorder = AccuracyRecorder(fold_elements=2 * logits.numel())
    recorder.on_train_summary((None, TARGETS), logits, None, 0, 0, {})
    assert recorder.train_tally.pairs is None
    recorder.on_train_summary((None, TARGETS), logits, None, 0, 1, {})
    assert recorder.train_tally.pairs.sum().item() == 2 * len(TARGETS)


def test_a_target_outside_the_classes_is_reported_when_the_epoch_is_published():
    recorder = AccuracyRecorder(fold_every=1)
    recorder.on_test_begin({})
    recorder.on_test_summary((None, torch.tensor([0, 5, -100])), logits_for(torch.tensor([0, 1, 2])), None, 0, 0, {})
    with pytest.raises(ValueError, match=r"2 target\(s\) outside 0..2"):
        recorder.on_test_end({"test": {}})


def test_accepts_tuple_outputs_and_dict_batches():
    recorder = AccuracyRecorder()
    logs = {"test": {}}
    recorder.on_test_begin(logs)
    recorder.on_test_summary({"image": None, "label": TARGETS}, (logits_for(PREDS), "aux"), None, 0, 0, logs)
    recorder.on_test_end(logs)
    assert logs["test"]["Acc"] == pytest.approx(100.0 * 5 / 7)


def test_train_accuracy_resets_each_epoch():
    recorder = AccuracyRecorder()
    feed(recorder, "train", [(logits_for(TARGETS), TARGETS)])
    logs = feed(recorder, "train", [(logits_for(PREDS), TARGETS)])
    assert logs["train"]["Acc"] == pytest.approx(100.0 * 5 / 7)


def test_mid_epoch_state_carries_the_partial_train_counts():
    first, second = [(logits_for(PREDS), TARGETS)] * 2, [(logits_for(TARGETS), TARGETS)]
    before = AccuracyRecorder()
    for i, (logits, targets) in enumerate(first):
        before.on_train_summary((None, targets), logits, None, 0, i, {})
    resumed = AccuracyRecorder()
    resumed.load_state_dict(before.state_dict())
    logs = feed(resumed, "train", second)
    assert logs["train"]["Acc"] == pytest.approx(100.0 * (5 + 5 + 7) / 21)


def test_writes_the_confusion_matrix_as_csv_and_png(tmp_path):
    feed(AccuracyRecorder(target_names=CLASSES, log_dir=str(tmp_path)), "test", [(logits_for(PREDS), TARGETS)])
    with open(tmp_path / "confusion_matrix.csv", newline="") as stream:
        table = list(csv.reader(stream))
    assert table[0] == ["true\\predicted", *CLASSES]
    assert [row[0] for row in table[1:]] == CLASSES
    assert [[int(v) for v in row[1:]] for row in table[1:]] == MATRIX
    assert (tmp_path / "confusion_matrix.png").read_bytes()[:4] == b"\x89PNG"


def test_an_evaluation_outside_training_logs_the_per_class_report_at_once(caplog):
    with caplog.at_level("INFO", logger="basetrainer"):
        feed(AccuracyRecorder(target_names=CLASSES), "test", [(logits_for(PREDS), TARGETS)])
    text = caplog.text
    assert "precision" in text and "bird" in text and "weighted avg" in text


def reports_of_a_run(caplog, tmp_path, **options):
    """Trains 3 epochs with an AccuracyRecorder(**options) writing to tmp_path; returns its result lines."""
    def callbacks():
        return [AccuracyRecorder(target_names=CLASSES, log_dir=str(tmp_path), **options)]

    with caplog.at_level("INFO", logger="basetrainer"):
        ClassifierTrainer(cfg(num_epochs=3, callbacks=callbacks)).run()
    return [r.getMessage().splitlines()[0] for r in caplog.records if getattr(r, "result", False)]


def test_during_training_the_per_class_report_comes_once_at_the_end(caplog, tmp_path):
    results = reports_of_a_run(caplog, tmp_path)
    assert [line for line in results if "per-class report" in line] == ["per-class report (epoch 3):"]
    assert [line.split(" (")[-1] for line in results if line.startswith("test Acc")] == \
        ["epoch 1)", "epoch 2)", "epoch 3)"]  # one line per evaluation, epochs counted from 1
    assert results[-1] == "per-class report (epoch 3):"


def test_report_epoch_logs_the_per_class_report_after_every_evaluation(caplog, tmp_path):
    results = reports_of_a_run(caplog, tmp_path, report="epoch")
    assert [line for line in results if "per-class report" in line] == \
        [f"per-class report (epoch {epoch}):" for epoch in (1, 2, 3)]


def test_report_false_logs_no_report_but_writes_the_confusion_matrix_at_the_end(caplog, tmp_path):
    results = reports_of_a_run(caplog, tmp_path, report=False)
    assert not [line for line in results if "per-class report" in line]
    assert (tmp_path / "confusion_matrix.csv").is_file() and (tmp_path / "confusion_matrix.png").is_file()


# ---------------------------------------------------------------------- MultiLossesRecorder
def feed_losses(recorder, batches, phase="train"):
    logs = {"train": {}, "test": {}}
    if phase == "test":
        recorder.on_test_begin(logs)
    for i, (size, losses) in enumerate(batches):
        inputs = (torch.zeros(size, 1), torch.zeros(size))
        losses = {k: torch.tensor(v) for k, v in losses.items()}
        (recorder.on_test_summary if phase == "test" else recorder.on_train_summary)(inputs, None, losses, 0, i, logs)
    if phase == "test":
        recorder.on_test_end(logs)
    else:
        recorder.on_epoch_end(0, logs)
    return logs


BATCHES = [(2, {"cls": 1.0, "box": 0.5}), (4, {"cls": 4.0, "box": 0.5})]  # means over 6 samples: cls 3.0, box 0.5


def test_groups_publish_each_mean_and_their_total_like_the_old_library():
    logs = feed_losses(MultiLossesRecorder({"loss": ["cls", "box"]}), BATCHES)
    assert logs["train"]["loss"] == pytest.approx({"cls": 3.0, "box": 0.5, "total_loss": 3.5})


def test_a_group_of_one_name_has_no_total():
    logs = feed_losses(MultiLossesRecorder({"det": ["box"]}), BATCHES, phase="test")
    assert logs["test"]["det"] == pytest.approx({"box": 0.5})


def test_flat_names_publish_one_entry_each():
    logs = feed_losses(MultiLossesRecorder(["cls"]), BATCHES)
    assert logs["train"] == pytest.approx({"cls": 3.0})


def test_without_indicators_every_loss_goes_into_one_group():
    logs = feed_losses(MultiLossesRecorder(), BATCHES)
    assert logs["train"]["loss"] == pytest.approx({"cls": 3.0, "box": 0.5, "total_loss": 3.5})


def test_a_missing_loss_name_is_a_clear_error():
    with pytest.raises(ValueError, match="no 'seg'"):
        feed_losses(MultiLossesRecorder(["seg"]), BATCHES)


def test_multi_losses_mid_epoch_state_carries_the_partial_means():
    before = MultiLossesRecorder(["cls"])
    before.on_train_summary((torch.zeros(2, 1), None), None, {"cls": torch.tensor(1.0)}, 0, 0, {})
    resumed = MultiLossesRecorder(["cls"])
    resumed.load_state_dict(before.state_dict())
    logs = feed_losses(resumed, [(4, {"cls": 4.0})])
    assert logs["train"]["cls"] == pytest.approx(3.0)


# ---------------------------------------------------------------------- 2 processes
@pytest.mark.slow
def test_two_processes_log_once_and_match_single_process_accuracy(tmp_path):
    result = run_python([WORKER, tmp_path], timeout=120, cwd=os.path.dirname(WORKER))
    assert result.returncode == 0, result.stderr[-3000:]

    model = make_model()
    model.load_state_dict(torch.load(tmp_path / "final.pt", weights_only=True))
    model.eval()
    x, y = blobs(101, seed=1).tensors
    with torch.no_grad():
        preds = model(x).argmax(1)
    expected_acc = 100.0 * int((preds == y).sum()) / 101

    with open(tmp_path / "history.csv", newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert [row["epoch"] for row in rows] == ["1", "2"]  # one row per epoch: rank 1 wrote none
    assert float(rows[-1]["test_Acc"]) == expected_acc
    with open(tmp_path / "confusion_matrix.csv", newline="") as stream:
        counts = [[int(v) for v in row[1:]] for row in list(csv.reader(stream))[1:]]
    assert counts == confusion_matrix(y, preds, 3).tolist()

    assert (tmp_path / "train_rank0.log").is_file() and not (tmp_path / "train_rank1.log").exists()
    assert len([p for p in os.listdir(tmp_path) if p.startswith("events.out.tfevents")]) == 1
    assert (result.stdout + result.stderr).count("per-class report") == 1  # at the end, from rank 0 only


def run_and_log(callbacks):
    """Runs the toy trainer for one epoch; returns the lines it logged and the error that ended it."""
    lines, handler = [], logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    get_logger().addHandler(handler)  # conftest's restore_basetrainer_logger puts the logger back after the test
    get_logger().setLevel(logging.INFO)
    try:
        ToyTrainer(toy_cfg(num_epochs=1, callbacks=callbacks)).run()
    except TrainingInterrupted as stopped:
        return lines, stopped
    return lines, None


def test_an_evaluation_cut_short_by_a_stop_signal_logs_no_partial_accuracy():
    class SignalAtSecondTestBatch(Callback):
        def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
            if batch == 1:
                os.kill(os.getpid(), signal.SIGTERM)

    lines, error = run_and_log([AccuracyRecorder(report=False), SignalAtSecondTestBatch()])
    assert "stopped by SIGTERM during evaluation" in str(error)
    assert not any("test Acc" in line for line in lines)
    lines, error = run_and_log([AccuracyRecorder(report=False)])  # the same job, not stopped
    assert error is None and any("test Acc" in line for line in lines)
