"""The run's history: log lines, TensorBoard scalars, history.csv / history.jsonl and a picture of the curves."""
import csv
import datetime
import io
import json
import math
import os
import time

import torch

from ..engine import comm
from ..engine.events import LOW, Callback
from ..utils.file_utils import write_text_atomic
from ..utils.log import get_logger
from ..utils.plots import as_float


class LogHistory(Callback):
    """Writes what the recorders published, on the main process only, into ``log_dir``.

    - Every ``log_freq`` batches, a line to ``logger`` and TensorBoard scalars
      ``train/loss_step``, ``train/lr`` and ``train/samples_per_s`` (step: the global batch
      ``epoch * num_steps + batch``)::

          epoch 2/10 iter 340/1000 loss 0.4123 lr 0.01 samples/s 1520 data 12% eta 0:03:12

      ``loss`` is the mean over the batches since the previous line and over all ranks
      (every rank joins one all-reduce at those batches only), read from the trainer's
      ``loss_tally``, so no loss is recorded here per step; ``samples/s`` counts all
      ranks; ``data`` is the share of the time spent waiting for batches (from one
      batch's end to the next one's start); ``eta`` includes the evaluations to come.
    - At each epoch end, a summary line; TensorBoard scalars ``<phase>/<name>`` for every
      number in ``logs["train"]`` and ``logs["test"]`` (nested dicts, as
      MultiLossesRecorder's groups, as ``<phase>/<group>/<name>``) and ``lr``; a row of
      ``history.csv``; a line of ``history.jsonl`` (``{"epoch", "lr", "train": {...},
      "test": {...}}``, nested as in ``logs``). The scalars' step is the global batch of
      the epoch's last batch, on the same axis as the per-step scalars: a resumed run
      then hides (TensorBoard's ``purge_step``) every scalar of the steps it runs again.
    - At the end of training, ``training_curves.png`` (needs matplotlib).

    The CSV columns are ``epoch, lr``, then ``train_<name>`` and ``test_<name>`` for each
    name of ``indicators`` (a group expands to ``<group>/<member>``), or, when
    ``indicators`` is empty, for each number the first epoch published; the order is
    fixed for the whole file. ``epoch`` counts from 0, like the trainer's.

    After a resume the files are kept and appended to, without the rows of the epochs
    that are run again, so the history reads as an uninterrupted run's.
    ``is_main_process=False`` turns off all writing on this process (rank 0 is the only
    writer in any case).
    """

    priority = LOW
    TENSORBOARD_HAND_OVER_SECS = 30.0  # per-step scalars wait at most this long for the writer
    TENSORBOARD_FLUSH_SECS = 10.0  # epoch ends flush the writer to disk at most this often

    def __init__(self, log_dir, log_freq=1, logger=None, indicators=(), is_main_process=True, *,
                 tensorboard=True, plot=True):
        super().__init__()
        self.log_dir = str(log_dir)
        self.log_freq = max(1, int(log_freq))
        self.logger = logger or get_logger()
        self.indicators = list(indicators or [])
        self.tensorboard = tensorboard
        self.plot = plot
        self.history = []  # one record per finished epoch, as written to history.jsonl
        self.columns = None  # the CSV header, fixed at the first epoch
        self._may_write = bool(is_main_process)
        self._writer = None
        self._events = []  # TensorBoard events not yet handed to the writer: (Summary, step, wall time)
        self._last_flush = -math.inf
        self._purge_step = None
        self._first_step = 0  # the global batch of this epoch's batch 0
        self._next_first_step = 0  # the same for the next epoch, when the loader has no length
        self._last_test_seconds = 0.0
        self._epoch_started = self._test_started = time.perf_counter()
        self._reset_window(self._epoch_started)

    @property
    def csv_path(self) -> str:
        return os.path.join(self.log_dir, "history.csv")

    @property
    def jsonl_path(self) -> str:
        return os.path.join(self.log_dir, "history.jsonl")

    @property
    def curves_path(self) -> str:
        return os.path.join(self.log_dir, "training_curves.png")

    def _writes(self) -> bool:
        return self._may_write and comm.is_main_process()

    # ------------------------------------------------------------------ events
    def on_train_begin(self, logs=None):
        trainer = self.trainer
        start_epoch = trainer.start_epoch if trainer is not None else int(logs.get("epoch", 0))
        start_batch = trainer.start_batch if trainer is not None else 0
        self.history = [record for record in self.history if record["epoch"] < start_epoch]
        if trainer is not None and trainer.num_steps and (start_epoch or start_batch):
            self._purge_step = start_epoch * trainer.num_steps + start_batch
        if self._writes():
            os.makedirs(self.log_dir, exist_ok=True)
            self._trim_files(start_epoch)

    def on_epoch_begin(self, epoch, logs=None):
        trainer = self.trainer
        self._first_step = epoch * trainer.num_steps if trainer is not None and trainer.num_steps else self._next_first_step
        now = time.perf_counter()
        self._epoch_started = now
        self._reset_window(now, trainer.start_batch if trainer is not None else 0)

    def on_batch_begin(self, batch, logs=None):
        self._data_seconds += time.perf_counter() - self._last_batch_end

    def on_batch_end(self, batch, logs=None):
        self._last_batch_end = time.perf_counter()
        if (batch + 1) % self.log_freq == 0:
            self._log_step(batch, logs)

    def on_test_begin(self, logs=None):
        self._test_started = time.perf_counter()

    def on_test_end(self, logs=None):
        self._last_test_seconds = time.perf_counter() - self._test_started

    def on_epoch_end(self, epoch, logs=None):
        trainer = self.trainer
        if trainer is not None:
            self._next_first_step = self._first_step + trainer.batch + 1
        record = {"epoch": epoch, "lr": as_float(logs.get("lr")),
                  "train": _numbers(logs.get("train", {})), "test": _numbers(logs.get("test", {}))}
        self.history.append(record)
        if self.columns is None:
            self.columns = self._choose_columns(record)
        if not self._writes():
            return
        self._log_epoch(record, time.perf_counter() - self._epoch_started)
        self._append(record)
        trainer = self.trainer
        step = (epoch + 1) * trainer.num_steps - 1 if trainer is not None and trainer.num_steps else epoch
        scalars = {f"{phase}/{name}": value for phase in ("train", "test") for name, value in _flatten(record[phase]).items()}
        self._add_scalars({**scalars, "lr": record["lr"]}, step, epoch_end=True)

    def on_train_end(self, logs=None):
        if not self._writes():
            return
        self._close_tensorboard()
        if self.plot and self.history:
            from ..utils import plots

            plots.plot_training_curves([self._csv_row(record) for record in self.history], self.curves_path)

    def on_exception(self, error, logs=None):
        # The step scalars up to a crash (a NaN loss, say) are what one wants to look at.
        if self._writes():
            self._close_tensorboard()

    def _close_tensorboard(self):
        if self._events:
            self._hand_over_events()
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    # ------------------------------------------------------------------ per-step line
    def _reset_window(self, now, first_batch=0, tally_now=None):
        """Starts the window of the next log line at ``first_batch``: its losses are what the
        trainer's loss tally sums from here on. ``tally_now``: the tally's ``(loss_sum,
        batches, samples)`` if the caller has just read them, else they are read here."""
        trainer = self.trainer
        if tally_now is None and trainer is not None:
            loss_sum, _, batches, samples = trainer.state.loss_tally.totals(trainer.device)
            tally_now = (loss_sum, batches, samples)
        self._tally_before = tally_now
        self._window_first_batch = first_batch
        self._data_seconds = 0.0
        self._window_started = self._last_batch_end = now

    def _log_step(self, batch, logs):
        trainer = self.trainer
        if trainer is None:
            return
        sum_before, batches_before, samples_before = self._tally_before
        loss_sum, _, batches, samples = trainer.state.loss_tally.totals(trainer.device)
        tally_now = (loss_sum, batches, samples)
        loss_sum, count, samples = comm.sum_over_ranks(loss_sum - sum_before, batches - batches_before,
                                                       samples - samples_before)
        now = time.perf_counter()
        elapsed = max(now - self._window_started, 1e-9)
        data_share = self._data_seconds / elapsed
        seconds_per_batch = elapsed / (batch + 1 - self._window_first_batch)
        self._reset_window(now, batch + 1, tally_now)
        if not self._writes() or not count:  # count 0: every batch of the window was a skipped step
            return
        loss, lr, speed = loss_sum / count, as_float(logs.get("lr")), samples / elapsed
        parts = [f"epoch {trainer.epoch + 1}/{trainer.num_epochs}",
                 f"iter {batch + 1}/{trainer.num_steps}" if trainer.num_steps else f"iter {batch + 1}",
                 f"loss {loss:.4f}", f"lr {lr:.4g}", f"samples/s {speed:.0f}", f"data {100 * data_share:.0f}%"]
        eta = self._eta(batch, seconds_per_batch)
        if eta is not None:
            parts.append(f"eta {datetime.timedelta(seconds=round(eta))}")
        self.logger.info(" ".join(parts))
        self._add_scalars({"train/loss_step": loss, "train/lr": lr, "train/samples_per_s": speed},
                          self._first_step + batch)

    def _eta(self, batch, seconds_per_batch):
        """Seconds left: the remaining batches at the current pace, and the evaluations still to come."""
        trainer = self.trainer
        if trainer is None or not trainer.num_steps:
            return None
        epochs_left = trainer.num_epochs - trainer.epoch - 1
        batches_left = epochs_left * trainer.num_steps + trainer.num_steps - batch - 1
        return batches_left * seconds_per_batch + (epochs_left + 1) * self._last_test_seconds

    # ------------------------------------------------------------------ per-epoch outputs
    def _log_epoch(self, record, seconds):
        trainer = self.trainer
        total = f"/{trainer.num_epochs}" if trainer is not None else ""
        parts = [f"epoch {record['epoch'] + 1}{total} done in {datetime.timedelta(seconds=round(seconds))}",
                 f"lr {record['lr']:.4g}"]
        for phase in ("train", "test"):
            values = _flatten(record[phase])
            if values:
                parts.append(phase + " " + " ".join(f"{name} {value:.5g}" for name, value in values.items()))
        self.logger.info(" | ".join(parts))

    def _choose_columns(self, record) -> list:
        train, test = _flatten(record["train"]), _flatten(record["test"])
        if self.indicators:
            seen = list(dict.fromkeys([*train, *test]))
            names = []
            for indicator in self.indicators:
                members = [k for k in seen if k == indicator or k.startswith(indicator + "/")]
                names += [m for m in (members or [indicator]) if m not in names]
            train_names = test_names = names
        else:
            train_names, test_names = list(train), list(test)
        return ["epoch", "lr", *(f"train_{n}" for n in train_names), *(f"test_{n}" for n in test_names)]

    def _csv_row(self, record) -> dict:
        row = {"epoch": record["epoch"], "lr": record["lr"]}
        for phase in ("train", "test"):
            row.update({f"{phase}_{name}": value for name, value in _flatten(record[phase]).items()})
        return {column: row.get(column, "") for column in self.columns}

    def _append(self, record):
        new_file = not os.path.isfile(self.csv_path)
        with open(self.csv_path, "a", newline="", encoding="utf-8") as stream:
            writer = csv.DictWriter(stream, fieldnames=self.columns, lineterminator="\n")
            if new_file:
                writer.writeheader()
            writer.writerow(self._csv_row(record))
        with open(self.jsonl_path, "a", encoding="utf-8") as stream:
            stream.write(json.dumps(record) + "\n")

    def _trim_files(self, start_epoch):
        """Keeps the files' rows of epochs before ``start_epoch``, so that a resumed run appends after them.

        A file that is missing (a resumed run writing to a new folder) is rebuilt from the
        history in this callback's state; a fresh run starts new files.
        """
        header = _trim_csv(self.csv_path, start_epoch)
        if header is not None:
            self.columns = header  # the file's column order stays fixed
        elif self.history and self.columns:
            write_text_atomic(self.csv_path, _csv_text([self.columns],
                                                       [self._csv_row(r) for r in self.history], self.columns))
        if not _trim_jsonl(self.jsonl_path, start_epoch) and self.history:
            write_text_atomic(self.jsonl_path, "".join(json.dumps(r) + "\n" for r in self.history))

    def _add_scalars(self, scalars, step, epoch_end=False):
        """Queues ``{tag: value}`` for TensorBoard as one event (tensorboard checksums each event in
        pure Python: one per log point costs a fraction of one per scalar), stamped with the time now.

        The queue goes to the writer at each epoch end, at the end of training, and once
        its oldest event is ``TENSORBOARD_HAND_OVER_SECS`` old. Each event given to the
        SummaryWriter wakes its writer thread, which then competes with training for the
        GIL: handed over once per log line, that cost ~7% of a small model's steps here;
        batched, it is lost in the noise. An epoch end also flushes the writer to disk
        (which it otherwise does every 120 s) unless it did so less than
        ``TENSORBOARD_FLUSH_SECS`` ago: an epoch's values reach TensorBoard within that
        time and one more epoch, and short epochs do not each wait for the disk.
        """
        if not self.tensorboard:
            return
        from tensorboard.compat.proto.summary_pb2 import Summary
        from torch.utils.tensorboard.summary import scalar

        values = [value for tag, number in scalars.items() for value in scalar(tag, number).value]
        now = time.time()
        self._events.append((Summary(value=values), step, now))
        if epoch_end:
            self._hand_over_events(flush=now - self._last_flush >= self.TENSORBOARD_FLUSH_SECS)
        elif now - self._events[0][2] >= self.TENSORBOARD_HAND_OVER_SECS:
            self._hand_over_events()

    def _hand_over_events(self, flush=False):
        writer = self._tensorboard()
        if writer is None:
            return
        for summary, step, walltime in self._events:
            writer.file_writer.add_summary(summary, step, walltime)
        self._events.clear()
        if flush:
            writer.flush()
            self._last_flush = time.time()

    def _tensorboard(self):
        """The SummaryWriter, created on first use (main process only); None when turned off."""
        if self._writer is None and self.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(self.log_dir, purge_step=self._purge_step)
        return self._writer

    # ------------------------------------------------------------------ state
    def state_dict(self):
        return {"history": self.history, "columns": self.columns}

    def load_state_dict(self, state):
        self.history = list(state.get("history", []))
        self.columns = state.get("columns")


def _numbers(values: dict) -> dict:
    """The numbers of a ``logs[phase]`` dict as floats, keeping nested dicts' structure."""
    out = {}
    for name, value in values.items():
        if isinstance(value, dict):
            nested = _numbers(value)
            if nested:
                out[name] = nested
        elif isinstance(value, (int, float, torch.Tensor)) and not isinstance(value, bool):
            if not isinstance(value, torch.Tensor) or value.numel() == 1:
                out[name] = float(value)
    return out


def _flatten(values: dict, prefix: str = "") -> dict:
    """``{"loss": {"cls": 1.0}}`` -> ``{"loss/cls": 1.0}``."""
    out = {}
    for name, value in values.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{name}/"))
        else:
            out[f"{prefix}{name}"] = value
    return out


def _epoch_of(cell) -> float:
    try:
        return float(cell)
    except (TypeError, ValueError):
        return float("inf")


def _csv_text(header_rows, dict_rows=(), columns=None) -> str:
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerows(header_rows)
    if dict_rows:
        csv.DictWriter(text, fieldnames=columns, lineterminator="\n").writerows(dict_rows)
    return text.getvalue()


def _trim_csv(path, start_epoch):
    """Drops the rows of epochs >= ``start_epoch``; returns the header, or None when no row is left (file removed)."""
    if not os.path.isfile(path):
        return None
    with open(path, newline="", encoding="utf-8") as stream:
        table = list(csv.reader(stream))
    header, rows = (table[0], table[1:]) if table else ([], [])
    kept = [row for row in rows if row and _epoch_of(row[0]) < start_epoch]
    if not kept:
        os.remove(path)
        return None
    if len(kept) != len(rows):
        write_text_atomic(path, _csv_text([header, *kept]))
    return header


def _trim_jsonl(path, start_epoch) -> int:
    """Drops the lines of epochs >= ``start_epoch``; returns how many lines are left (file removed if none)."""
    if not os.path.isfile(path):
        return 0
    with open(path, encoding="utf-8") as stream:
        lines = [line for line in stream if line.strip()]
    kept = [line for line in lines if _epoch_of(_json_epoch(line)) < start_epoch]
    if not kept:
        os.remove(path)
    elif len(kept) != len(lines):
        write_text_atomic(path, "".join(kept))
    return len(kept)


def _json_epoch(line):
    try:
        return json.loads(line).get("epoch")
    except (ValueError, AttributeError):
        return None
