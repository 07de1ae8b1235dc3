"""What recording a classifier's accuracy costs per training step: by hand (``metric/``) or by torchmetrics.

    python bench/overhead.py --metrics [--rounds 9]

The MLP of ``mlp_case.py`` (``overhead.py``'s) gives the logits of its 500 random batches (64 x 10, already in
memory); each variant records them 4 epochs long, as ``on_train_summary`` gets them, and reads its values at each
epoch end: ``AccuracyRecorder``'s tally (accuracy and confusion matrix in one; ``metric/``), torchmetrics'
``MulticlassAccuracy`` (with and without its argument checks) and ``MulticlassConfusionMatrix`` updated
with every batch, both updated once per 128 batches concatenated (as ``MetricsRecorder`` feeds them), and
a mean of the loss weighted by batch size by ``MeanMeter`` and by torchmetrics' ``MeanMetric`` (with and
without its NaN check). It prints the median microseconds per step over interleaved rounds, beyond a loop
that only walks the batches (one thread).
"""
import gc
import statistics
import time

import torch
from mlp_case import EPOCHS, STEPS_PER_EPOCH, make_batches, make_model  # bench/, beside this script

from basetrainer.metric.accuracy_recorder import ClassificationTally
from basetrainer.metric.meters import MeanMeter


def tally_by_hand(batches):
    """AccuracyRecorder's training path: its tally per batch, its counts (accuracy, confusion matrix) per epoch."""
    tally = ClassificationTally()
    for _ in range(EPOCHS):
        for logits, targets in batches:
            tally.update(logits, targets)
        tally.counts()
        tally.reset()


def torchmetrics_per_batch(*metrics, fold_every=1):
    """``metrics`` (made fresh per run) computed at every epoch end and updated with every batch, or with
    ``fold_every`` batches concatenated, as MetricsRecorder does."""
    def run(batches):
        made, pending = [metric() for metric in metrics], []
        for _ in range(EPOCHS):
            for index, batch in enumerate(batches, start=1):
                pending.append(batch)
                if len(pending) == fold_every or index == len(batches):
                    logits, targets = (batch if fold_every == 1 else
                                       (torch.cat([b[0] for b in pending]), torch.cat([b[1] for b in pending])))
                    for metric in made:
                        metric.update(logits, targets)
                    pending.clear()
            for metric in made:
                metric.compute()
                metric.reset()
    return run


def means(meter):
    """A mean of every batch's loss, weighted by its size, as LossesRecorder keeps the test loss: ``meter()`` is
    MeanMeter or torchmetrics' MeanMetric, read at every epoch end."""
    def run(batches):
        made = meter()
        for _ in range(EPOCHS):
            for logits, _targets in batches:
                made.update(logits[0, 0], len(logits))
            made.compute()
            made.reset()
    return run


def walk_only(batches):
    for _ in range(EPOCHS):
        list(batches)


def metric_variants():
    from torchmetrics import MeanMetric
    from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix

    def accuracy(checked=True):
        return lambda: MulticlassAccuracy(num_classes=10, average="micro", validate_args=checked)


    def matrix():
        return MulticlassConfusionMatrix(num_classes=10, validate_args=False)
    return {"walk only": walk_only, "ours: tally (acc + matrix)": tally_by_hand,
            "tm accuracy": torchmetrics_per_batch(accuracy()),
            "tm accuracy, no checks": torchmetrics_per_batch(accuracy(False)),
            "tm confusion matrix": torchmetrics_per_batch(matrix),
            "tm acc + matrix": torchmetrics_per_batch(accuracy(False), matrix),
            "tm acc + matrix, folded": torchmetrics_per_batch(accuracy(False), matrix, fold_every=128),
            "ours: MeanMeter (loss)": means(MeanMeter),
            "tm MeanMetric (loss)": means(MeanMetric),
            "tm MeanMetric, no NaN check": means(lambda: MeanMetric(nan_strategy="disable"))}


def metric_costs(args):
    """Microseconds per training step of each way of recording the accuracy (see the module docstring)."""
    model = make_model(args)
    with torch.no_grad():
        batches = [(model(x), y) for x, y in make_batches(args)]
    variants = metric_variants()
    for run in variants.values():  # warm-up
        run(batches[: STEPS_PER_EPOCH // 5])
    names, times = list(variants), {name: [] for name in variants}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            gc.collect()
            start = time.perf_counter()
            variants[name](batches)
            times[name].append(time.perf_counter() - start)
    steps = STEPS_PER_EPOCH * EPOCHS
    walk = statistics.median(times["walk only"])
    print(f"recording the accuracy of batches of {args.batch} logits of 10 classes, {steps} steps ({EPOCHS} epochs), "
          f"1 thread, {args.rounds} interleaved rounds, torch {torch.__version__}")
    print(f"{'variant':<30}{'us per step':>12}{'min':>8}{'max':>8}")
    for name in names[1:]:
        cost = [(t - walk) / steps * 1e6 for t in times[name]]
        print(f"{name:<30}{statistics.median(cost):>12.1f}{min(cost):>8.1f}{max(cost):>8.1f}")
