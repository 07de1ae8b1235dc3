"""A detector's predictions as a COCO results file: what COCO's evaluation server and pycocotools' ``loadRes`` read."""
import json

from ...distributed import comm
from ...utils.file_utils import atomic_write
from .models import without_background


def coco_results(predictions, dataset) -> list:
    """``[{"image_id", "category_id", "bbox": [x, y, width, height], "score"}]`` for ``predictions`` (one
    ``{"boxes", "scores", "labels"}`` per image of ``dataset``, a :class:`~.coco.CocoDetection` or COCO shards, in
    its order):
    labels become the annotation file's category ids again."""
    return [result for image_id, prediction in zip(dataset.image_ids, predictions)
            for result in image_results(image_id, prediction, dataset.category_ids)]


def image_results(image_id, prediction, category_ids) -> list:
    """The COCO results of one image's ``{"boxes", "scores", "labels"}`` (boxes x1 y1 x2 y2, label ``i`` the
    category ``category_ids[i - 1]``): what the results file holds for it, and what the test mAP evaluates."""
    results = []
    for box, score, label in zip(prediction["boxes"].tolist(), prediction["scores"].tolist(),
                                 prediction["labels"].tolist()):
        x1, y1, x2, y2 = box
        # Unrounded: read back, the file gives the model's boxes and scores exactly, and the same mAP.
        results.append({"image_id": image_id, "category_id": category_ids[label - 1],
                        "bbox": [x1, y1, x2 - x1, y2 - y1], "score": score})
    return results


def write_coco_results(trainer, loader, path) -> int:
    """Writes the trainer's predictions for every image of ``loader`` (over every rank, in dataset order; boxes of
    the background left out) to ``path`` from the main process; returns the number of boxes."""
    results = coco_results(without_background(trainer.predict(loader)), loader.dataset)
    if comm.is_main_process():
        with atomic_write(path) as stream:
            json.dump(results, stream)
    return len(results)
