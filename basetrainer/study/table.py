"""A study's table: one row per run, read from the run's folder once it has ended, and ``study.csv`` / ``study.md``.

A run's row comes from what the engine wrote, whatever callbacks the run's trainer has:
``log/run_summary.json`` (per epoch: the evaluated metric, the training time so far, samples/s, peak memory;
the lr and the accumulation the run trained with; see :mod:`basetrainer.engine.run_summary`) and
``log/target.json`` (when and where the target was reached, :mod:`basetrainer.engine.target`), with how its
process ended. The row is written once, beside the run (``study_row.json``), and the tables are made from
those files: a study started again writes the same rows for the runs it had done.
"""
import csv
import io
import json
import os

from ..engine.run_summary import SUMMARY_FILE
from ..engine.target import TARGET_FILE, Target
from ..utils.file_utils import write_text_atomic

ROW_FILE = "study_row.json"  # a finished run's row and curve; its presence marks the run done
# (key, header of study.md, format of study.md): the columns of both tables, in order.
COLUMNS = (
    ("batch_size", "batch", "{:d}"),
    ("global_batch", "global batch", "{:d}"),
    ("lr", "lr", "{:.4g}"),
    ("samples_per_s", "samples/s", "{:.0f}"),
    ("epoch_s", "s/epoch", "{:.1f}"),
    ("epochs", "epochs", "{:d}"),
    ("target_epoch", "epoch to target", "{:d}"),
    ("target_step", "step to target", "{:d}"),
    ("target_time_s", "time to target (s)", "{:.1f}"),
    ("best", "best {metric}", "{:.2f}"),
    ("final", "final {metric}", "{:.2f}"),
    ("training_s", "training (s)", "{:.1f}"),
    ("peak_memory_gib", "peak memory (GiB)", "{:.2f}"),
    ("status", "status", "{}"),
)


def run_row(run_dir: str, batch_size: int, plan, outcome) -> dict:
    """The row of the run of ``batch_size`` in ``run_dir`` (``COLUMNS``; None where the run gave nothing),
    and its curve: ``{"row": {...}, "curve": [[training seconds, metric value], ...]}`` (one point per epoch
    that evaluated the metric). ``plan``: the study's :class:`~.plan.StudyPlan`; ``outcome``: how the run's
    process ended (:class:`~.process.Outcome`)."""
    summary = _read_json(os.path.join(run_dir, "log", SUMMARY_FILE)) or {}
    records = summary.get("epochs", [])
    target = _read_json(os.path.join(run_dir, "log", TARGET_FILE)) or {}
    metric = Target(plan.target_metric, 0.0, plan.target_mode)
    values = [metric.read(record.get("test", {})) for record in records]
    times = [record.get("time_s") for record in records]
    evaluated = [value for value in values if value is not None]
    best = (max if plan.target_mode == "max" else min)(evaluated) if evaluated else None
    global_batch = batch_size * plan.processes * int(summary.get("accumulate_grad_batches") or 1)
    epoch_seconds = [later - earlier for earlier, later in zip([0.0, *times], times)] if None not in times else []
    row = {
        "batch_size": batch_size,
        "global_batch": global_batch,
        "lr": summary.get("lr"),  # as lr_scaling scaled it for this global batch
        # the first epoch's speed includes the warm-up of allocators and caches: left out when there are others
        "samples_per_s": _mean([record.get("samples_per_s") for record in records[1:] or records]),
        "epoch_s": _mean(epoch_seconds),
        "epochs": len(records) or None,
        "target_epoch": target.get("epoch"),
        "target_step": target.get("step"),
        "target_time_s": target.get("time_s"),
        "best": best,
        "final": values[-1] if values else None,
        "training_s": times[-1] if times else None,
        "peak_memory_gib": max((record["peak_memory_gib"] for record in records
                                if record.get("peak_memory_gib") is not None), default=None),
        "status": outcome.status,
    }
    curve = [[time_s, value] for time_s, value in zip(times, values) if time_s is not None and value is not None]
    return {"row": row, "curve": curve}


# ------------------------------------------------------------------ row files
def write_row(run_dir: str, result: dict) -> str:
    """Writes a run's row and curve (``run_row``'s result) atomically: from then on the run is done."""
    return write_text_atomic(os.path.join(run_dir, ROW_FILE), json.dumps(result, indent=1) + "\n")


def read_row(run_dir: str):
    """The row and curve of a done run, or None when the run is not done (no row file)."""
    return _read_json(os.path.join(run_dir, ROW_FILE))


# ------------------------------------------------------------------ tables
def write_tables(rows, out: str, metric: str) -> tuple:
    """Writes ``study.csv`` (every column, numbers as Python writes them, empty for none) and ``study.md`` (the
    same, rounded, with the study's answer below: :func:`summary`) in ``out``; returns their paths."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow([key for key, _, _ in COLUMNS])
    writer.writerows([["" if row[key] is None else row[key] for key, _, _ in COLUMNS] for row in rows])
    csv_path = write_text_atomic(os.path.join(out, "study.csv"), text.getvalue())
    headers = [header.format(metric=metric) for _, header, _ in COLUMNS]
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join("" if row[key] is None else form.format(row[key]) for key, _, form in COLUMNS) + " |"
              for row in rows]
    md_path = write_text_atomic(os.path.join(out, "study.md"), "\n".join([*lines, "", summary(rows, metric), ""]))
    return csv_path, md_path


def summary(rows, metric: str) -> str:
    """The study's answer in words: ``Soonest to the target: batch 64 (global 64: 63.7 s of training, epoch 9).
    Final Acc: 98.61 at batch 16, 98.89 at batch 32, 98.05 at batch 64.``"""
    reached = [row for row in rows if row["target_time_s"] is not None]
    if reached:
        soonest = min(reached, key=lambda row: row["target_time_s"])
        words = (f"Soonest to the target: batch {soonest['batch_size']} (global {soonest['global_batch']}: "
                 f"{soonest['target_time_s']:.1f} s of training, epoch {soonest['target_epoch']}).")
    else:
        words = "No run reached the target." if any(row["status"] == "ok" for row in rows) else "No run finished."
    finals = [row for row in rows if row["final"] is not None]
    if finals:
        words += " Final " + metric + ": " + ", ".join(f"{row['final']:.2f} at batch {row['batch_size']}"
                                                        for row in finals) + "."
    return words


# ------------------------------------------------------------------ reading a run's files
def _mean(values):
    values = [value for value in values if value is not None]
    return sum(values) / len(values) if values else None


def _read_json(path: str):
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as stream:
        return json.load(stream)
