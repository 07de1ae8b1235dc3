"""Metrics: running sums kept on the device, and the accuracy recorder with its per-class report."""
from .accuracy_recorder import AccuracyRecorder, ClassificationTally
from .classification_report import confusion_matrix, format_report, precision_recall_f1
from .meters import MeanMeter

__all__ = ["MeanMeter", "confusion_matrix", "format_report", "precision_recall_f1",
           "AccuracyRecorder", "ClassificationTally"]
