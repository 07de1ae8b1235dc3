"""Accuracy of a classifier (top-1 and top-k), its per-class report and its confusion matrix.

Written by hand rather than with torchmetrics because it is cheaper per training step, where it runs
(``python bench/overhead.py --metrics``, 2-core CPU VM, batches of 64 logits of 10 classes): this tally
records accuracy and confusion matrix for 7 microseconds a step; torchmetrics' ``MulticlassAccuracy`` and
``MulticlassConfusionMatrix`` updated with every batch cost 192 (27 times as much), and fed once per 128
batches, as ``MetricsRecorder`` feeds them, 13. Per batch this keeps two references and counts them every
128 batches in a few kernels, none of which waits for the device; each torchmetrics update formats its
inputs and counts them at once, and the confusion matrix (and every per-class average) counts with
``torch.bincount``, which on CUDA reads the largest value back. Other metrics come from torchmetrics:
:class:`~basetrainer.metric.metrics_recorder.MetricsRecorder`.
"""
import os

import torch

from ..callbacks.recording import phase_reduction
from ..distributed import comm
from ..engine.events import HIGH, Callback
from ..utils.log import RESULT, get_logger
from . import classification_report


class AccuracyRecorder(Callback):
    """Publishes the epoch's accuracy in percent as ``logs["train"][indicator]`` and ``logs["test"][indicator]``.

    ``outputs`` are the logits, ``(batch, classes)`` (or a tuple/list whose first item is
    the logits); the targets are ``inputs[1]``, or ``inputs["label"]`` for dict batches.
    With ``topk=(1, 5)``, ``"<indicator>_top5"`` is published too. Train values are
    published at ``on_epoch_end``, test values at ``on_test_end``.

    After each evaluation the main process logs one line, the test accuracy. The per-class
    precision, recall and F1 (labelled with ``target_names``) of the last evaluation are
    logged at the end of training with ``report=True``, after every evaluation with
    ``report="epoch"``, never with ``report=False``; at the same points (at the end with
    ``report=False``), when ``log_dir`` is given, the confusion matrix is written there as
    ``confusion_matrix.csv`` and ``confusion_matrix.png`` (rows: true class, columns:
    predicted class). An evaluation outside training (``trainer.evaluate()``) reports at
    once. The accuracy line and the report are results (``extra=RESULT``);
    ``test_matrix`` holds the last confusion matrix.

    Per batch this only keeps references to the logits and targets; every ``fold_every``
    batches (sooner when they hold ``fold_elements`` logits) they are folded into
    confusion counts on the device without waiting for it,
    and the ranks' counts are summed once per epoch, so the values equal a single
    process's on the same data. A target outside the model's classes is reported then.
    ``confusion_matrix`` is the old name of ``log_dir``.
    """

    priority = HIGH

    def __init__(self, target_names=None, indicator="Acc", topk=(1,), log_dir=None, logger=None,
                 report=True, fold_every=128, confusion_matrix=None, fold_elements=2 ** 22):
        super().__init__()
        self.target_names = list(target_names) if target_names is not None else None
        self.indicator = indicator
        self.topk = tuple(sorted({int(k) for k in topk if int(k) > 1}))
        self.log_dir = log_dir or confusion_matrix or None
        self.logger = logger or get_logger()
        self.report = report
        self.train_tally = ClassificationTally(self.topk, fold_every, fold_elements)
        self.test_tally = ClassificationTally(self.topk, fold_every, fold_elements)
        self.test_matrix = None
        self._training = False  # between on_train_begin and on_train_end: the report waits for the end

    def publishes(self):
        return (self.indicator, *(f"{self.indicator}_top{k}" for k in self.topk))

    def on_train_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
        self.train_tally.update(_logits(outputs), _targets(inputs))

    def on_test_begin(self, logs=None):
        self.test_tally.reset()

    def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
        self.test_tally.update(_logits(outputs), _targets(inputs))

    def on_train_begin(self, logs=None):
        self._training = True

    def on_test_end(self, logs=None):
        if self.state is not None and self.state.evaluation_abandoned:
            return  # a stop signal cut the evaluation short: no partial accuracy
        logs = {} if logs is None else logs
        matrix = self._publish(self.test_tally, "test", logs)
        if matrix is not None:
            self.test_matrix = matrix
            if self.is_main_process:
                self._log_accuracy(matrix, logs)
                if self.report == "epoch" or not self._training:
                    self._write_report(matrix)

    def on_train_end(self, logs=None):
        if self.test_matrix is not None and self.is_main_process and self.report != "epoch":
            self._write_report(self.test_matrix)
        self._training = False

    def on_epoch_end(self, epoch, logs=None):
        self._publish(self.train_tally, "train", {} if logs is None else logs)
        self.train_tally.reset()

    def state_dict(self):
        # Only the training counts: a checkpoint can be taken mid-epoch, never mid-evaluation.
        return {"train": self.train_tally.state_dict()}

    def load_state_dict(self, state):
        trainer = self.trainer
        self.train_tally.load_state_dict(state["train"], trainer.device if trainer is not None else None)

    def _publish(self, tally, phase, logs):
        """Writes the phase's accuracies into ``logs[phase]``; every rank takes part in the reduction.

        Returns the confusion matrix (CPU), or None when the phase saw no sample.
        """
        reduce = phase_reduction(self, phase)
        if reduce is None:
            return None
        counts = tally.counts(reduce=reduce)
        if counts is None:
            return None
        matrix, topk_hits = counts
        total = int(matrix.sum())
        if total == 0:
            return None
        values = logs.setdefault(phase, {})
        values[self.indicator] = 100.0 * int(matrix.trace()) / total
        for k, hits in zip(self.topk, topk_hits.tolist()):
            values[f"{self.indicator}_top{k}"] = 100.0 * hits / total
        return matrix

    def _epoch_label(self) -> str:
        """`` (epoch N)``, N from 1, during training; empty for an evaluation on its own."""
        state = self.state
        return f" (epoch {state.epoch + 1})" if self._training and state is not None else ""

    def _log_accuracy(self, matrix, logs):
        self.logger.info("test %s %.4f on %d samples%s", self.indicator, logs["test"][self.indicator],
                         int(matrix.sum()), self._epoch_label(), extra=RESULT)

    def _write_report(self, matrix):
        where = self._epoch_label()
        if self.report:
            self.logger.info("per-class report%s:\n%s", where,
                             classification_report.format_report(matrix, self.target_names), extra=RESULT)
        if self.log_dir:
            from ..utils import plots

            classification_report.save_confusion_matrix_csv(
                matrix, os.path.join(self.log_dir, "confusion_matrix.csv"), self.target_names)
            plots.plot_confusion_matrix(matrix, os.path.join(self.log_dir, "confusion_matrix.png"),
                                        self.target_names, title=f"confusion matrix{where}")


class ClassificationTally:
    """Confusion counts and top-k hit counts, kept on the device without a host sync per batch.

    ``update`` appends references to a batch's logits and targets; every ``fold_every``
    batches, or fewer when that many would hold over ``fold_elements`` logits (16 MB of
    float32 by default; counted from the first batch of each fold),
    they are concatenated and counted in a few kernels (max, bincount or index_add, topk),
    none of which waits for the device. Few, large folds: inside a training loop each
    kernel launch costs far more than its work on a few thousand logits.
    """

    def __init__(self, topk=(), fold_every: int = 128, fold_elements: int = 2 ** 22):
        self.topk = tuple(topk)
        self.fold_every = fold_every
        self.fold_elements = fold_elements
        self.reset()

    def reset(self) -> None:
        self._pending = []
        self._fold_at = self.fold_every  # batches per fold, set by the first batch of each
        self.num_classes = 0
        self.pairs = None  # flat confusion counts, see classification_report.count_pairs
        self.topk_hits = None  # int64, one count per k in topk

    def update(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        pending = self._pending
        if not pending:  # the fold's size in batches, from its first batch's size
            self._fold_at = max(1, min(self.fold_every, self.fold_elements // max(1, logits.numel())))
        pending.append((logits.detach(), targets))  # integer targets carry no graph
        if len(pending) >= self._fold_at:
            self.fold()

    def fold(self) -> None:
        if not self._pending:
            return
        logits = torch.cat([item[0] for item in self._pending])
        targets = torch.cat([item[1] for item in self._pending])
        self._pending = []
        if logits.dim() != 2 or targets.dim() != 1 or targets.is_floating_point():
            raise TypeError(f"AccuracyRecorder needs (batch, classes) logits and (batch,) integer targets; "
                            f"got logits {tuple(logits.shape)} and targets {tuple(targets.shape)} {targets.dtype}")
        self.num_classes = num_classes = logits.shape[1]
        preds = logits.max(1).indices  # the first maximum, as argmax(1), at half its cost on CPU
        pairs = classification_report.count_pairs(targets, preds, num_classes)
        self.pairs = pairs if self.pairs is None else self.pairs + pairs
        if self.topk:
            ranked = logits.topk(min(max(self.topk), num_classes), dim=1).indices == targets[:, None]
            hits = torch.stack([ranked[:, :k].any(1).sum() for k in self.topk])
            self.topk_hits = hits if self.topk_hits is None else self.topk_hits + hits

    def counts(self, reduce: bool = False):
        """``(confusion matrix, topk_hits)`` on the CPU, summed over ranks when ``reduce``; None if nothing was counted.

        With ``reduce`` every rank must call it, also a rank that saw no batch.
        """
        self.fold()
        num_classes = max(comm.all_gather(self.num_classes)) if reduce else self.num_classes
        if num_classes == 0:
            return None
        cells = num_classes * num_classes + 2
        if self.pairs is None:
            flat = torch.zeros(cells + len(self.topk), dtype=torch.int64)
        elif self.topk:
            flat = torch.cat([self.pairs, self.topk_hits])
        else:
            flat = self.pairs.clone() if reduce else self.pairs  # the all-reduce works in place
        if reduce:
            comm.all_reduce_sum(flat)
        flat = flat.cpu()
        return classification_report.matrix_from_counts(flat[:cells], num_classes), flat[cells:]

    def state_dict(self) -> dict:
        self.fold()
        return {"num_classes": self.num_classes,
                "pairs": None if self.pairs is None else self.pairs.cpu(),
                "topk_hits": None if self.topk_hits is None else self.topk_hits.cpu()}

    def load_state_dict(self, state: dict, device=None) -> None:
        self.reset()
        if state.get("pairs") is not None:
            self.num_classes = int(state["num_classes"])
            self.pairs = state["pairs"].to(device or "cpu")
            hits = state.get("topk_hits")
            self.topk_hits = hits.to(device or "cpu") if hits is not None and self.topk else None


def _logits(outputs) -> torch.Tensor:
    logits = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"AccuracyRecorder needs run_step's outputs to be the logits (or a tuple whose first "
                        f"item is), got {type(logits).__name__}")
    return logits


def _targets(inputs) -> torch.Tensor:
    return inputs["label"] if isinstance(inputs, dict) else inputs[1]
