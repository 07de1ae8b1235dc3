"""COCO mean average precision of a detector's test predictions: pycocotools' COCOeval, once, on every rank's boxes."""
from ...callbacks.recording import phase_reduction
from ...distributed import comm
from ...engine.events import HIGH, Callback
from ...utils.log import RESULT, get_logger
from .coco_evaluation import STATS, evaluate, ground_truth_file, ground_truth_of, require_pycocotools
from .results import image_results

PER_CLASS = "AP"  # logs["test"]["AP"][class name]: the class's AP, published as "AP/<class name>"


class MeanAPRecorder(Callback):
    """Publishes the test set's COCO average precisions as pycocotools' ``COCOeval`` computes them, values from 0
    to 1: the six of its summary under the names of ``coco_evaluation.STATS`` (``logs["test"]["map"]``, IoU
    0.5 to 0.95; ``"map_50"``, ``"map_75"``, ``"map_small"``, ``"map_medium"``, ``"map_large"``, -1 where the test
    set has no box of that size), and each class's AP as ``logs["test"]["AP"][name]`` (``"AP/<name>"`` to a
    ``target``, ``ModelCheckpoint`` or the history); the main process logs mAP, ``mAP@0.5``, ``mAP@0.75`` and the
    classes' AP in one line after each evaluation.

    ``on_test_summary`` reads ``outputs``, the model's list of ``{"boxes", "scores", "labels"}`` per image, and
    ``inputs[1]``, the targets (``{"boxes", "labels", "image_id"}``, boxes x1 y1 x2 y2), and keeps each image's
    boxes as the COCO results the run's ``predictions.json`` holds (:func:`~.results.image_results`; label ``i``
    is the category ``category_ids[i - 1]``, called ``class_names[i - 1]``). At ``on_test_end`` every rank's are
    gathered on the main process (an image met twice, by a sampler's padding or by two ranks of one data-parallel
    replica, counts once), which evaluates them once against the ground truth: the COCO annotation file
    ``annotations`` (its crowd regions and areas included, as COCO's published figures count them), or without
    one the targets' boxes. The values go to every rank, so that all choose the same best model and stop
    together. A class with no box in the test set has no AP.
    """

    priority = HIGH

    def __init__(self, class_names, category_ids=None, annotations=None, logger=None):
        super().__init__()
        self.class_names = list(class_names)
        self.category_ids = list(category_ids) if category_ids is not None else list(range(1, len(class_names) + 1))
        self.annotations = annotations
        self.logger = logger or get_logger()
        self.images = []  # (image_id, its COCO results, its target boxes or None)
        self._ground_truth = None
        require_pycocotools()  # a missing extra is refused when the task is built, not after the first epoch

    def publishes(self):
        return (*STATS, *(f"{PER_CLASS}/{name}" for name in self.class_names))

    def on_test_begin(self, logs=None):
        self.images = []

    def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
        for prediction, target in zip(outputs, inputs[1]):
            boxes = None if self.annotations else {key: target[key].detach().cpu() for key in ("boxes", "labels")}
            image_id = target["image_id"]
            self.images.append((image_id, image_results(image_id, prediction, self.category_ids), boxes))

    def on_test_end(self, logs=None):
        reduce = phase_reduction(self, "test")
        if reduce is None or (self.state is not None and self.state.evaluation_abandoned):
            return
        images, self.images = self.images, []
        if reduce:  # to the main process alone, as detectron2 gathers: the others wait for the values
            gathered = comm.gather_to_main(images)
            images = [image for rank in gathered for image in rank] if gathered is not None else []
        values = comm.broadcast_object(self.compute(images) if comm.is_main_process() else None)
        if values is None:
            return
        if logs is not None:
            logs.setdefault("test", {}).update(values)
        if self.is_main_process:
            self.logger.info("%s", result_line(values), extra=RESULT)

    def compute(self, images):
        """The published values (``STATS`` and ``"AP": {name: value}``) of ``images``, ``[(image_id, COCO results,
        target boxes or None)]``, each image counted once; None without images."""
        unique = {}
        for image_id, results, boxes in images:
            unique.setdefault(image_id, (results, boxes))
        if not unique:
            return None
        if self.annotations:
            if self._ground_truth is None:
                self._ground_truth = ground_truth_file(self.annotations)
            truth = self._ground_truth
        else:
            truth = ground_truth_of([(image_id, boxes) for image_id, (_, boxes) in unique.items()],
                                    self.category_ids, self.class_names)
        values = evaluate(truth, [result for results, _ in unique.values() for result in results], list(unique))
        names = dict(zip(self.category_ids, self.class_names))
        values[PER_CLASS] = {names.get(category_id, str(category_id)): ap
                             for category_id, ap in values[PER_CLASS].items()}
        return values


def result_line(values: dict) -> str:
    """``mAP 0.612 | mAP@0.5 0.901 | mAP@0.75 0.702 | AP 0: 0.70 1: 0.55 ...``."""
    per_class = " ".join(f"{name}: {ap:.2f}" for name, ap in values[PER_CLASS].items())
    return (f"mAP {values['map']:.3f} | mAP@0.5 {values['map_50']:.3f} | mAP@0.75 {values['map_75']:.3f}"
            + (f" | AP {per_class}" if per_class else ""))
