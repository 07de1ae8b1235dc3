"""COCO mean average precision of a detector's test predictions, from every rank's predictions."""
import importlib.util

from ...callbacks.recording import phase_reduction
from ...distributed import comm
from ...engine.events import HIGH, Callback
from ...errors import ConfigError
from ...utils.log import RESULT, get_logger

SUMMARY = {"map": "map", "map_50": "map_50", "map_75": "map_75"}  # published name -> torchmetrics' result key
PER_CLASS = "AP"  # logs["test"]["AP"][class name]: the class's AP, published as "AP/<class name>"


class MeanAPRecorder(Callback):
    """Publishes the test set's COCO mAP (IoU 0.5 to 0.95), ``mAP@0.5`` and ``mAP@0.75`` as ``logs["test"]["map"]``,
    ``"map_50"``, ``"map_75"``, and each class's AP as ``logs["test"]["AP"][name]`` (``"AP/<name>"`` to a
    ``target``, ``ModelCheckpoint`` or the history), values from 0 to 1; the main process logs them in one
    line after each evaluation.

    ``on_test_summary`` reads ``outputs``, the model's list of ``{"boxes", "scores", "labels"}`` per image,
    and ``inputs[1]``, the targets (``{"boxes", "labels"}``, boxes x1 y1 x2 y2), and keeps them on the CPU.
    At ``on_test_end`` every rank's are gathered (the evaluation sampler gives each image to one rank, so
    none is counted twice or lost) and torchmetrics' ``MeanAveragePrecision`` (pycocotools' COCOeval)
    computes the values on every rank, the same there as in one process. ``class_names[i]`` names label
    ``i + 1`` (0 is the background). A class with neither a box nor a prediction in the test set has no AP.
    """

    priority = HIGH

    def __init__(self, class_names, logger=None):
        super().__init__()
        self.class_names = list(class_names)
        self.logger = logger or get_logger()
        self.predictions, self.targets = [], []
        mean_average_precision()  # a missing extra is refused when the task is built, not after the first epoch

    def publishes(self):
        return (*SUMMARY, *(f"{PER_CLASS}/{name}" for name in self.class_names))

    def on_test_begin(self, logs=None):
        self.predictions, self.targets = [], []

    def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
        self.predictions += [{key: prediction[key].detach().cpu() for key in ("boxes", "scores", "labels")}
                             for prediction in outputs]
        self.targets += [{key: target[key].detach().cpu() for key in ("boxes", "labels")} for target in inputs[1]]

    def on_test_end(self, logs=None):
        reduce = phase_reduction(self, "test")
        if reduce is None or (self.state is not None and self.state.evaluation_abandoned):
            return
        predictions, targets = self.predictions, self.targets
        if reduce:
            gathered = comm.all_gather((predictions, targets), data_parallel=True)
            predictions = [prediction for rank, _ in gathered for prediction in rank]
            targets = [target for _, rank in gathered for target in rank]
        self.predictions, self.targets = [], []
        if not targets:
            return
        values = self.compute(predictions, targets)
        if logs is not None:
            logs.setdefault("test", {}).update(values)
        if self.is_main_process:
            self.logger.info("%s", result_line(values), extra=RESULT)

    def compute(self, predictions, targets) -> dict:
        """``{"map", "map_50", "map_75", "AP": {name: value}}`` of ``predictions`` against ``targets``."""
        metric = mean_average_precision()(box_format="xyxy", iou_type="bbox", class_metrics=True,
                                          backend="pycocotools")
        metric.update(predictions, targets)
        result = metric.compute()
        values = {name: float(result[key]) for name, key in SUMMARY.items()}
        per_class = result["map_per_class"].reshape(-1).tolist()
        labels = result["classes"].reshape(-1).tolist()
        values[PER_CLASS] = {self._name(label): ap for label, ap in zip(labels, per_class) if ap >= 0}
        return values

    def _name(self, label: int) -> str:
        return self.class_names[label - 1] if 0 < label <= len(self.class_names) else str(label)


def result_line(values: dict) -> str:
    """``mAP 0.612 | mAP@0.5 0.901 | mAP@0.75 0.702 | AP 0: 0.70 1: 0.55 ...``."""
    per_class = " ".join(f"{name}: {ap:.2f}" for name, ap in values[PER_CLASS].items())
    return (f"mAP {values['map']:.3f} | mAP@0.5 {values['map_50']:.3f} | mAP@0.75 {values['map_75']:.3f}"
            + (f" | AP {per_class}" if per_class else ""))


def mean_average_precision():
    """torchmetrics' ``MeanAveragePrecision`` class; a ConfigError naming the extra when it or pycocotools is
    missing."""
    try:
        from torchmetrics.detection import MeanAveragePrecision
    except ImportError:
        MeanAveragePrecision = None
    missing = [name for name, found in (("torchmetrics", MeanAveragePrecision is not None),
                                        ("pycocotools", importlib.util.find_spec("pycocotools") is not None))
               if not found]
    if missing:
        raise ConfigError(f"the detection task's mAP needs torchmetrics and pycocotools ({missing[0]} is missing); "
                          f"pip install \"basetrainer[detection]\"")
    return MeanAveragePrecision
