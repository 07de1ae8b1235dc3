"""training_curves.png: a run's epoch history as a picture."""
import os

from ..utils import plots
from .history import history_columns, history_row


def write_training_curves(history, log_dir, indicators=()):
    """Draws ``training_curves.png`` in ``log_dir`` from the epoch records: one panel per
    column of history.csv (train and test together) and one for the lr, by epoch.

    Returns the picture's path, or None when there is no epoch or no matplotlib.
    """
    if not history:
        return None
    columns = history_columns(history[0], indicators)
    rows = [{column: row.get(column, "") for column in columns} for row in map(history_row, history)]
    return plots.plot_training_curves(rows, os.path.join(log_dir, "training_curves.png"))
