"""Confusion matrices, and the per-class precision, recall and F1 read from them.

Rows of a confusion matrix are the true classes and columns the predicted ones, as in
scikit-learn: ``matrix[i, j]`` counts samples of class ``i`` predicted as ``j``.
"""
import csv
import io

import torch

from ..utils.file_utils import write_text_atomic


def confusion_matrix(targets: torch.Tensor, preds: torch.Tensor, num_classes: int) -> torch.Tensor:
    """A ``(num_classes, num_classes)`` int64 tensor of counts, on the inputs' device."""
    return matrix_from_counts(count_pairs(targets, preds, num_classes), num_classes)


def count_pairs(targets: torch.Tensor, preds: torch.Tensor, num_classes: int) -> torch.Tensor:
    """The confusion counts, flat, without a host sync: ``num_classes ** 2 + 2`` int64 values.

    Value ``1 + i * num_classes + j`` counts class ``i`` predicted as ``j``; the first and
    the last values count targets below 0 and above ``num_classes - 1``, so that a bad
    label is reported when the counts are read (:func:`matrix_from_counts`) instead of
    stopping the device mid-epoch. Counts of several batches (or ranks) add up.
    """
    cells = num_classes * num_classes
    # target * C + pred is in [0, cells) exactly when 0 <= target < C: clamping sends the
    # other targets to -1 or cells, the two outer values once shifted by one.
    index = preds.reshape(-1).long().add(targets.reshape(-1), alpha=num_classes).clamp_(-1, cells).add_(1)
    if index.device.type == "cpu":  # one op; CUDA's bincount reads the maximum back (a host sync)
        return torch.bincount(index, minlength=cells + 2)
    counts = torch.zeros(cells + 2, dtype=torch.int64, device=index.device)
    return counts.index_add_(0, index, torch.ones_like(index))


def matrix_from_counts(counts: torch.Tensor, num_classes: int) -> torch.Tensor:
    """The ``(num_classes, num_classes)`` matrix of :func:`count_pairs`'s counts.

    Raises ValueError if a target was out of range.
    """
    outside = int(counts[0] + counts[-1])
    if outside:
        raise ValueError(f"{outside} target(s) outside 0..{num_classes - 1}: the model's output has {num_classes} "
                         f"classes; check the labels or the model's last layer")
    return counts[1:-1].reshape(num_classes, num_classes)


def precision_recall_f1(matrix) -> dict:
    """Per-class ``precision``, ``recall``, ``f1`` and ``support``, as CPU tensors.

    A score whose denominator is 0 is 0, as in scikit-learn.
    """
    matrix = torch.as_tensor(matrix).detach().cpu().double()
    hits = matrix.diagonal()
    predicted, support = matrix.sum(0), matrix.sum(1)
    precision = torch.where(predicted > 0, hits / predicted.clamp(min=1), torch.zeros_like(hits))
    recall = torch.where(support > 0, hits / support.clamp(min=1), torch.zeros_like(hits))
    both = precision + recall
    f1 = torch.where(both > 0, 2 * precision * recall / both.clamp(min=1e-300), torch.zeros_like(hits))
    return {"precision": precision, "recall": recall, "f1": f1, "support": support.long()}


def format_report(matrix, target_names=None, digits: int = 4) -> str:
    """A text table like scikit-learn's ``classification_report``: one line per class, then the averages."""
    scores = precision_recall_f1(matrix)
    columns = [scores["precision"], scores["recall"], scores["f1"]]
    support = scores["support"]
    total = int(support.sum())
    names = _names(len(support), target_names)
    width = max(len("weighted avg"), *(len(n) for n in names))

    def line(label, values, count):
        cells = " ".join(f"{'':>10}" if v is None else f"{v:>10.{digits}f}" for v in values)
        return f"{label:>{width}} {cells} {count:>10d}"

    lines = [f"{'':>{width}} {'precision':>10} {'recall':>10} {'f1-score':>10} {'support':>10}", ""]
    lines += [line(name, [float(c[i]) for c in columns], int(support[i])) for i, name in enumerate(names)]
    accuracy = float(torch.as_tensor(matrix).double().diagonal().sum()) / max(total, 1)
    share = support.double() / max(total, 1)
    lines += ["", line("accuracy", [None, None, accuracy], total),
              line("macro avg", [float(c.mean()) for c in columns], total),
              line("weighted avg", [float((c * share).sum()) for c in columns], total)]
    return "\n".join(lines)


def save_confusion_matrix_csv(matrix, path: str, target_names=None) -> str:
    """Writes the counts as CSV: a header of predicted classes, then one line per true class."""
    counts = torch.as_tensor(matrix).detach().cpu().long().tolist()
    names = _names(len(counts), target_names)
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["true\\predicted", *names])
    for name, row in zip(names, counts):
        writer.writerow([name, *row])
    return write_text_atomic(path, text.getvalue())


def _names(num_classes: int, target_names) -> list:
    """``target_names`` when it names every class, else the class indices."""
    if target_names is not None and len(target_names) == num_classes:
        return [str(n) for n in target_names]
    return [str(i) for i in range(num_classes)]
