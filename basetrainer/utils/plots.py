"""Pictures of a run: training curves and confusion matrices, as PNG files; and the earlier library's
``plot_multi_line``, which shows curves in a pyplot window.

matplotlib is optional (``pip install basetrainer[plots]``) and imported only when a
picture is drawn. Figures are drawn with ``matplotlib.figure.Figure``, not pyplot, so the
user's matplotlib backend and global state are left alone. Without matplotlib, the first
picture asked for logs one line and every picture is skipped.
"""
import math
import os

from .file_utils import atomic_write
from .log import get_logger

logger = get_logger()

_warned_missing = False


def plot_training_curves(rows, path):
    """Draws one panel per indicator (its train and test values by epoch) and one for the LR.

    ``rows`` are the history's rows, one per epoch: ``{"epoch": 1, "lr": 0.1,
    "train_loss": 0.9, "test_loss": 1.1, "train_Acc": 71.0, ...}``; a missing or empty
    value leaves a gap. Returns ``path``, or None when matplotlib is missing or there is
    nothing to draw.
    """
    if not rows or _figure_class(path) is None:
        return None
    return _save(training_curves_figure(rows), path)


def training_curves_figure(rows):
    """The figure behind :func:`plot_training_curves` (matplotlib must be installed).

    A panel whose values span more than two powers of ten has a log scale (the LR's
    aside), so that a large first-epoch loss does not flatten the rest.
    """
    indicators = []
    for row in rows:
        for key in row:
            for phase in ("train_", "test_"):
                if key.startswith(phase) and key[len(phase):] not in indicators:
                    indicators.append(key[len(phase):])
    panels = indicators + ["lr"]
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    columns = min(3, len(panels))
    lines = math.ceil(len(panels) / columns)
    figure = Figure(figsize=(5 * columns, 3.6 * lines))
    # Fixed margins rather than a layout engine: drawing once instead of twice halves the cost.
    figure.subplots_adjust(left=0.06, right=0.98, bottom=0.12 / lines, top=1 - 0.08 / lines, wspace=0.25,
                           hspace=0.4)
    axes = figure.subplots(lines, columns, squeeze=False).ravel()
    epochs = [row["epoch"] for row in rows]
    for ax, name in zip(axes, panels):
        series = [("lr", "lr")] if name == "lr" else [("train", f"train_{name}"), ("test", f"test_{name}")]
        for label, key in series:
            values = [as_float(row.get(key)) for row in rows]
            points = sum(v == v for v in values)
            if points:  # a curve of one point is only its marker: draw it large enough to see
                ax.plot(epochs, values, marker="o", markersize=3 if points > 1 else 7, label=label)
        ax.set_title(name, y=1.0)  # a fixed place: finding one clear of the ticks costs half the drawing
        ax.set_xlabel("epoch")
        # Epoch ticks only, even for one epoch (its default view is +-0.05 around it, ticked in hundredths).
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        if min(epochs) == max(epochs):
            ax.set_xlim(epochs[0] - 0.5, epochs[0] + 0.5)
        if name != "lr" and _spans_decades(ax):  # e.g. a first-epoch loss 1000x the last flattens the rest
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        if name != "lr" and ax.lines:
            ax.legend()
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    return figure


def plot_confusion_matrix(matrix, path, target_names=None, title="confusion matrix"):
    """Draws ``matrix`` (rows: true class, columns: predicted class), coloured by the share of each row.

    Counts are written in the cells up to 30 classes, class names on the axes up to 50.
    Returns ``path``, or None when matplotlib is missing.
    """
    Figure = _figure_class(path)
    if Figure is None:
        return None
    counts = [[int(v) for v in row] for row in (matrix.tolist() if hasattr(matrix, "tolist") else matrix)]
    n = len(counts)
    names = list(target_names) if target_names is not None and len(target_names) == n else [str(i) for i in range(n)]
    shares = [[v / max(sum(row), 1) for v in row] for row in counts]
    side = min(max(4.0, 0.5 * n + 2.0), 30.0)
    figure = Figure(figsize=(side + 1.0, side), layout="constrained")
    ax = figure.subplots()
    image = ax.imshow(shares, cmap="Blues", vmin=0.0, vmax=1.0)
    figure.colorbar(image, ax=ax, label="share of the true class")
    if n <= 50:
        ax.set_xticks(range(n), names, rotation=90 if n > 10 else 0)
        ax.set_yticks(range(n), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title)
    if n <= 30:
        for i in range(n):
            for j in range(n):
                ax.text(j, i, str(counts[i][j]), ha="center", va="center", fontsize=8,
                        color="white" if shares[i][j] > 0.5 else "black")
    return _save(figure, path)


def _figure_class(path):
    global _warned_missing
    try:
        from matplotlib.figure import Figure
    except ImportError:
        if not _warned_missing:
            logger.warning("matplotlib is not installed: pip install matplotlib to get %s "
                           "(pictures are skipped)", os.path.basename(path))
            _warned_missing = True
        return None
    return Figure


def _save(figure, path) -> str:
    """Writes the PNG atomically, so a reader never sees half a picture."""
    with atomic_write(path, binary=True) as stream:
        # zlib level 1: files ~20% larger than at the default 6, encoded in a fraction of the time
        figure.savefig(stream, format="png", dpi=100, pil_kwargs={"compress_level": 1})
    return path


def as_float(value) -> float:
    """``value`` as a float, NaN when it is missing or not a number (a gap in a curve or a log)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _spans_decades(ax, decades=2) -> bool:
    """Whether the positive values plotted on ``ax`` span more than ``decades`` powers of ten."""
    values = [v for line in ax.lines for v in line.get_ydata() if v == v and v > 0]
    return bool(values) and all(v > 0 for line in ax.lines for v in line.get_ydata() if v == v) \
        and max(values) / min(values) > 10 ** decades


def plot_multi_line(x_data_list, y_data_list, line_names=None, title="", xlabel="", ylabel=""):
    """One line per pair of ``x_data_list``/``y_data_list`` in a new pyplot figure, then ``pyplot.show()``
    (a window, or nothing under a non-interactive backend such as ``MPLBACKEND=Agg``); returns the figure."""
    try:
        from matplotlib import pyplot
    except ImportError:
        raise ImportError('plot_multi_line needs matplotlib: pip install "basetrainer[plots]"') from None
    figure = pyplot.figure(figsize=(10, 10))
    names = line_names or [None] * len(x_data_list)
    for x, y, name in zip(x_data_list, y_data_list, names):
        pyplot.plot(list(x), list(y), lw=2, label=name)
    pyplot.xlabel(xlabel)
    pyplot.ylabel(ylabel)
    pyplot.title(title)
    if line_names:
        pyplot.legend(loc="lower right")
    pyplot.grid(True)
    pyplot.show()
    return figure
