"""Metrics: running sums kept on the device, the accuracy recorder with its per-class report, and torchmetrics'
metrics by name (:class:`~basetrainer.metric.metrics_recorder.MetricsRecorder`; torchmetrics is imported only
when a metric is named)."""
from .accuracy_recorder import AccuracyRecorder, ClassificationTally
from .classification_report import confusion_matrix, format_report, precision_recall_f1
from .meters import MeanMeter
from .metrics_recorder import MetricsRecorder

__all__ = ["MeanMeter", "confusion_matrix", "format_report", "precision_recall_f1",
           "AccuracyRecorder", "ClassificationTally", "MetricsRecorder"]
