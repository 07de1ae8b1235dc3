"""history.csv and history.jsonl: the run's epochs as a table and as JSON lines."""
import csv
import io
import json
import os

from ..utils.file_utils import append_text, write_text_atomic
from .base import Logger, flatten


class HistoryLogger(Logger):
    """Writes one row of ``history.csv`` and one line of ``history.jsonl`` per epoch, in ``log_dir``.

    ``history.jsonl`` holds each epoch record as LogHistory made it (``{"epoch", "lr",
    "train": {...}, "test": {...}}``, nested as in ``logs``). The CSV columns are
    ``epoch, lr``, then ``train_<name>`` and ``test_<name>`` for each name of
    ``indicators`` (a group expands to ``<group>/<member>``), or, when ``indicators`` is
    empty, for each number the first epoch published, and with a ``target`` (config key)
    ``target_<name>`` for what it records (``reached_value``, ``time_s``, ``step``,
    ``epoch``, ``samples``: empty until it is reached); the order is fixed for the whole
    file. ``epoch`` counts from 1.

    At the start of a run both files are written anew from the history the run keeps:
    a fresh run replaces an old history in the same folder; a resumed one keeps the
    epochs it does not run again (a missing file is rebuilt from the checkpoint's
    history), so that the files read as an uninterrupted run's.

    Two epochs, as LogHistory reports them::

        >>> import tempfile
        >>> from basetrainer.loggers import HistoryLogger
        >>> history = HistoryLogger(tempfile.mkdtemp())
        >>> history.start([], resumed=False, step=0)
        >>> history.log_epoch({"epoch": 1, "lr": 0.1, "train": {"loss": 0.9}, "test": {"Acc": 80.0}},
        ...                   step=99)
        >>> history.log_epoch({"epoch": 2, "lr": 0.1, "train": {"loss": 0.4}, "test": {"Acc": 91.5}},
        ...                   step=199)
        >>> print(open(history.csv_path).read(), end="")
        epoch,lr,train_loss,test_Acc
        1,0.1,0.9,80.0
        2,0.1,0.4,91.5
    """

    name = "csv"

    def __init__(self, log_dir, indicators=()):
        self.log_dir = str(log_dir)
        self.indicators = list(indicators or [])
        self.columns = None  # the CSV header, fixed by the first epoch

    @property
    def csv_path(self) -> str:
        return os.path.join(self.log_dir, "history.csv")

    @property
    def jsonl_path(self) -> str:
        return os.path.join(self.log_dir, "history.jsonl")

    def start(self, history, resumed, step):
        self.columns = history_columns(history[0], self.indicators) if history else None
        if history:
            rows = [self._row(record) for record in history]
            write_text_atomic(self.csv_path, _csv_text(self.columns, rows, header=True))
            write_text_atomic(self.jsonl_path, "".join(json.dumps(record) + "\n" for record in history))
            return
        for path in (self.csv_path, self.jsonl_path):
            if os.path.isfile(path):
                os.remove(path)

    def log_epoch(self, record, step):
        if self.columns is None:
            self.columns = history_columns(record, self.indicators)
        new_file = not os.path.isfile(self.csv_path)
        append_text(self.csv_path, _csv_text(self.columns, [self._row(record)], header=new_file))
        append_text(self.jsonl_path, json.dumps(record) + "\n")

    def _row(self, record) -> dict:
        row = history_row(record)
        return {column: row.get(column, "") for column in self.columns}


def history_row(record: dict) -> dict:
    """An epoch record as one flat row: ``{"epoch", "lr", "train_<name>": ..., "test_<name>": ...}``, then
    ``target_<name>`` for what a target records (``time_s``, ``step``...; empty until it is reached)."""
    row = {"epoch": record["epoch"], "lr": record["lr"]}
    for phase in ("train", "test"):
        row.update({f"{phase}_{name}": value for name, value in flatten(record[phase]).items()})
    row.update({f"target_{name}": value for name, value in record.get("target", {}).items()})
    return row


def history_columns(record: dict, indicators=()) -> list:
    """The columns of a history table whose first epoch is ``record`` (see :class:`HistoryLogger`)."""
    train, test = flatten(record["train"]), flatten(record["test"])
    if indicators:
        seen = list(dict.fromkeys([*train, *test]))
        names = []
        for indicator in indicators:
            members = [k for k in seen if k == indicator or k.startswith(indicator + "/")]
            names += [m for m in (members or [indicator]) if m not in names]
        train_names = test_names = names
    else:
        train_names, test_names = list(train), list(test)
    return ["epoch", "lr", *(f"train_{n}" for n in train_names), *(f"test_{n}" for n in test_names),
            *(f"target_{n}" for n in record.get("target", {}))]


def _csv_text(columns, rows, header) -> str:
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns, lineterminator="\n")
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return text.getvalue()
