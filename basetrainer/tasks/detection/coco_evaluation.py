"""COCO's own evaluation of a detector's boxes: pycocotools' ``COCOeval`` on a COCO results list, against the ground
truth as a pycocotools ``COCO`` (the annotation file itself, or the boxes of the test targets built in memory).

::

    truth = ground_truth_file("val/instances.json")
    values = evaluate(truth, results, image_ids)
    # {"map": ..., "map_50": ..., ..., "AP": {category_id: ap}}

The values are the six average precisions of ``COCOeval.stats`` (the first six numbers its ``summarize`` prints:
IoU 0.5 to 0.95, 0.5, 0.75, then small, medium and large boxes; detectron2 reports the same six), under
torchmetrics' names for them (``STATS``), and each category's AP as detectron2 reads it from the precision table
(IoU 0.5 to 0.95, every area, 100 boxes). COCOeval says -1 where there is nothing to measure (no box of the test set
in that size range); a category with no box in the evaluated images has no AP. COCOeval's own IoU and recall
thresholds are used (torchmetrics' are float32 linspaces, 0.6000000238 for 0.6, so a box of IoU 0.6 that COCO
counts at 0.6 it does not): evaluating the results file the run writes with pycocotools gives the same numbers, as
the detection tests check.
"""
import contextlib
import importlib.util
import io

from ...errors import ConfigError

# The average precisions of COCOeval.stats, in its order, under the names the detection task publishes.
STATS = ("map", "map_50", "map_75", "map_small", "map_medium", "map_large")


def require_pycocotools() -> None:
    """A one-line ConfigError naming the pip command when pycocotools is missing."""
    if importlib.util.find_spec("pycocotools") is None:
        raise ConfigError("the detection task's mAP needs pycocotools, which is missing; "
                          "pip install \"basetrainer[detection]\"")


def ground_truth_file(path):
    """The COCO annotation file ``path`` as a pycocotools ``COCO`` (crowd regions and areas as the file gives
    them)."""
    from pycocotools.coco import COCO

    with _quiet():
        return COCO(str(path))


def ground_truth_of(targets, category_ids, names):
    """A pycocotools ``COCO`` built in memory from ``targets``, ``[(image_id, {"boxes", "labels"})]`` (boxes x1 y1
    x2 y2, label ``i`` the category ``category_ids[i - 1]`` called ``names[i - 1]``), each box's area its own,
    no crowd regions: for data whose annotation file is not at hand (COCO shards hold the boxes alone)."""
    images, annotations = [], []
    for image_id, target in targets:
        images.append({"id": image_id})
        for (x1, y1, x2, y2), label in zip(target["boxes"].tolist(), target["labels"].tolist()):
            annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                                "category_id": category_ids[label - 1], "bbox": [x1, y1, x2 - x1, y2 - y1],
                                "area": (x2 - x1) * (y2 - y1), "iscrowd": 0})
    categories = [{"id": category_id, "name": name} for category_id, name in zip(category_ids, names)]
    return _in_memory({"images": images, "annotations": annotations, "categories": categories})


def evaluate(ground_truth, results, image_ids) -> dict:
    """``{name: value for name in STATS}`` and ``"AP": {category_id: ap}`` of ``results`` (COCO results dicts, left
    untouched) on the images ``image_ids`` of ``ground_truth``."""
    from pycocotools.cocoeval import COCOeval

    with _quiet():
        detections = (ground_truth.loadRes([dict(result) for result in results]) if results else
                      _in_memory({"images": ground_truth.dataset["images"], "annotations": [],
                                  "categories": ground_truth.dataset["categories"]}))
        evaluation = COCOeval(ground_truth, detections, "bbox")
        evaluation.params.imgIds = sorted(set(image_ids))
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    values = {name: float(value) for name, value in zip(STATS, evaluation.stats)}  # the recalls left out
    precision = evaluation.eval["precision"][:, :, :, 0, -1]  # IoU x recall x category; every area, 100 boxes
    values["AP"] = {}
    for index, category_id in enumerate(evaluation.params.catIds):
        measured = precision[:, :, index][precision[:, :, index] > -1]
        if measured.size:
            values["AP"][category_id] = float(measured.mean())
    return values


def _in_memory(dataset):
    from pycocotools.coco import COCO

    coco = COCO()
    coco.dataset = dataset
    with _quiet():
        coco.createIndex()
    return coco


@contextlib.contextmanager
def _quiet():
    """pycocotools reports each stage on stdout; the run logs one line of its own."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield
