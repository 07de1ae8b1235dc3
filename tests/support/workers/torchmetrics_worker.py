"""torchmetrics metrics evaluated by 2 gloo processes, for the comparison with one process on the same data.

    python tests/support/workers/torchmetrics_worker.py OUT_DIR

In one launch: the toy trainer (untrained, the same seeded weights on every rank) evaluates with
:class:`MetricsRecorder` the test sets of ``TEST_SIZES`` (101 samples: shards of 51 and 50 in batches of 16;
1 sample: rank 1 sees none); and each rank feeds its shard of the 101 to metrics synced by torchmetrics'
own ``gather_all_tensors``. Rank 0 saves ``{"recorder": {size: logs["test"]}, "torchmetrics": {name:
value}, "task imports torchmetrics": whether importing the classification task and the metrics, before
any metric is named, imported torchmetrics (in the launching process)}`` to OUT_DIR/results.pt.
"""
import importlib
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # tests/

from basetrainer.data.samplers import EvalSampler  # noqa: E402
from basetrainer.distributed import comm  # noqa: E402
from basetrainer.distributed.launch import launch  # noqa: E402
from basetrainer.metric.metrics_recorder import MetricsRecorder  # noqa: E402
from support.toy import ToyTrainer, blobs, toy_cfg  # noqa: E402

CLASSES = 4
TEST_SIZES = (101, 1)
# Sum states (accuracy, F1), states of concatenated scores (AUROC, average precision, calibration), a
# confusion matrix (kappa, MCC) and one value per class.
METRICS = ["MulticlassAccuracy", {"MulticlassF1Score": {"average": "macro"}}, "MulticlassAUROC",
           "MulticlassAveragePrecision", "MulticlassCalibrationError", "MulticlassCohenKappa",
           "MulticlassMatthewsCorrCoef", {"MulticlassRecall": {"average": "none"}}]
SYNCED_BY_TORCHMETRICS = ("MulticlassAccuracy", "MulticlassAUROC")


def evaluate(test_size: int) -> dict:
    """``logs["test"]`` of one evaluation of the toy trainer's ``test_size`` samples with the recorder."""
    recorder = MetricsRecorder(METRICS, num_classes=CLASSES)
    return ToyTrainer(toy_cfg(test_size=test_size, callbacks=[recorder])).evaluate()


def synced_by_torchmetrics(model) -> dict:
    """The metrics of ``SYNCED_BY_TORCHMETRICS`` fed this rank's shard of the 101 samples and computed with
    torchmetrics' own sync (``gather_all_tensors`` over the world)."""
    from torchmetrics import classification

    x, y = blobs(TEST_SIZES[0], seed=1).tensors
    shard = list(EvalSampler(range(len(y))))
    with torch.no_grad():
        logits = model(x[shard])
    values = {}
    for name in SYNCED_BY_TORCHMETRICS:
        metric = getattr(classification, name)(num_classes=CLASSES)
        metric.update(logits, y[shard])
        values[name] = float(metric.compute())
    return values


def main(out_dir, task_imports_torchmetrics):
    results = {"recorder": {size: evaluate(size) for size in TEST_SIZES},
               "task imports torchmetrics": task_imports_torchmetrics}
    trainer = ToyTrainer(toy_cfg(test_size=TEST_SIZES[0]))
    trainer.model.eval()
    results["torchmetrics"] = synced_by_torchmetrics(trainer.model)
    if comm.is_main_process():
        torch.save(results, os.path.join(out_dir, "results.pt"))


if __name__ == "__main__":
    importlib.import_module("basetrainer.tasks.classification")
    launch(main, 2, args=(sys.argv[1], "torchmetrics" in sys.modules))
