"""What the tuning tools write: their points as CSV, the range test's loss against lr as a PNG, and a table for
the terminal. Files are written atomically (a reader never sees half of one)."""
import csv

from ..utils.file_utils import atomic_write


def write_csv(rows, path: str) -> str:
    """``rows`` (dicts with the same keys) as a CSV file with a header; returns ``path``."""
    with atomic_write(path) as stream:
        writer = csv.DictWriter(stream, fieldnames=list(rows[0]) if rows else [])
        writer.writeheader()
        writer.writerows(rows)
    return path


def plot_lr_find(result, path: str) -> str:
    """The smoothed loss (and, faint, each step's) against the learning rate on a log axis, with the suggestion
    and the lowest smoothed loss marked; the loss axis spans the smoothed loss, so that one wild step of the
    divergence does not flatten the curve. Returns ``path``."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4.5), layout="constrained")
    ax = figure.subplots()
    ax.plot(result.lrs, result.losses, color="tab:blue", alpha=0.25, linewidth=1, label="loss")
    ax.plot(result.lrs, result.smoothed, color="tab:blue", label="smoothed loss")
    if result.smoothed:
        lowest = result.lrs.index(result.lowest)
        ax.plot([result.lowest], [result.smoothed[lowest]], "v", color="tab:gray", markersize=8,
                label=f"lowest smoothed loss: lr {result.lowest:.3g}")
    if result.suggestion is not None:
        at = result.lrs.index(result.suggestion)
        ax.plot([result.suggestion], [result.smoothed[at]], "o", color="tab:red", markersize=8,
                label=f"suggestion: {result.override}")
    if result.smoothed:
        low, high = min(result.smoothed), max(result.smoothed)
        margin = 0.05 * (high - low) or 0.05 * abs(high) or 0.05
        ax.set_ylim(low - margin, high + margin)
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("training loss")
    ax.set_title(f"learning-rate range test ({len(result.lrs)} of {result.num_steps} steps)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    with atomic_write(path, binary=True) as stream:
        figure.savefig(stream, format="png", dpi=100)
    return path


def format_table(rows, columns) -> str:
    """``rows`` as aligned text: ``columns`` is ``[(key, heading, format)]``, right-aligned but for the last (a
    note, left-aligned); a None value shows as ``-``."""
    cells = [[heading for _, heading, _ in columns]]
    cells += [["-" if row[key] is None else fmt.format(row[key]) for key, _, fmt in columns] for row in rows]
    widths = [max(len(line[index]) for line in cells) for index in range(len(columns))]
    return "\n".join("  ".join([*(cell.rjust(width) for cell, width in zip(line[:-1], widths)), line[-1]]).rstrip()
                     for line in cells)
