"""Old import path of the plotting helpers: ``plot_multi_line`` draws curves (an LR schedule, say) with pyplot.

The pictures of a run (training curves, confusion matrix) are drawn by :mod:`basetrainer.utils.plots`.
"""


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


_REMOVED = ("plot_bar", "plot_skew_kurt", "demo", "demo_for_skew_kurt")


def __getattr__(name):
    if name in _REMOVED:
        raise ImportError(f"{__name__}.{name} was removed: draw it with matplotlib.pyplot")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
