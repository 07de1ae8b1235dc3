"""``study.png``: the time to target against the batch size, and the metric against training time, one curve per run.

matplotlib is optional (``pip install basetrainer[plots]``): without it the picture is skipped and the
study says so in one line; the tables are written either way.
"""
import os

from ..utils.file_utils import atomic_write

PLOT_FILE = "study.png"


def write_study_plot(results, out: str, metric: str, target_value=None):
    """Draws ``out``/study.png from the runs' ``results`` (each ``{"row", "curve"}``, see
    :func:`~.table.run_row`): on the left, the training seconds to reach ``target_value`` against the
    global batch (the runs that did not reach it are listed below the axis); on the right, ``metric``
    against training seconds, one curve per run, the target as a dashed line. Returns the path, or None
    when matplotlib is missing."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    figure = Figure(figsize=(12, 4.5), layout="constrained")
    to_target, curves = figure.subplots(1, 2)
    rows = [result["row"] for result in results]
    reached = [row for row in rows if row["target_time_s"] is not None]
    if reached:
        to_target.plot([row["global_batch"] for row in reached], [row["target_time_s"] for row in reached],
                       marker="o")
        for row in reached:
            to_target.annotate(f"epoch {row['target_epoch']}", (row["global_batch"], row["target_time_s"]),
                               textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    to_target.set_xscale("log", base=2)
    to_target.set_xticks([row["global_batch"] for row in rows], [str(row["global_batch"]) for row in rows])
    missed = [str(row["global_batch"]) for row in rows if row["target_time_s"] is None]
    to_target.set_xlabel("global batch" + (f"\nnot reached: {', '.join(missed)}" if missed else ""))
    to_target.set_ylabel("training seconds to target")
    to_target.set_ylim(bottom=0)
    to_target.set_title(f"time to {metric} {target_value:g}" if target_value is not None else "no target set")
    drawn = [result for result in results if result["curve"]]
    for result in drawn:
        seconds, values = zip(*result["curve"])
        curves.plot(seconds, values, marker="o", markersize=3, label=f"batch {result['row']['batch_size']}")
    if target_value is not None:
        curves.axhline(target_value, color="gray", linestyle="--", linewidth=1)
    curves.set_xlabel("training seconds")
    curves.set_ylabel(metric)
    curves.set_title(f"{metric} against training time")
    if drawn:
        curves.legend(fontsize=8)
    for axes in (to_target, curves):
        axes.grid(True, alpha=0.3)
    path = os.path.join(out, PLOT_FILE)
    with atomic_write(path, binary=True) as stream:
        figure.savefig(stream, format="png", dpi=100)
    return path
