"""The run's summary: what the engine itself measured, per epoch and in all, written whatever callbacks a trainer has.

The trainer adds :class:`RunSummary` to its callbacks in ``build`` (among ``callbacks``, so that the epochs of
the runs a resumed one continues travel in checkpoints). After every epoch and at the end of training the main
process writes ``<work_dir>/log/run_summary.json`` (a trainer without a work_dir writes none: it is a file of
the run's folder)::

    {"epochs": [{"epoch": 1, "time_s": 12.4, "samples_per_s": 131.0, "peak_memory_gib": 0.91,
                 "test": {"Acc": 97.2, "loss": 0.11}}, ...],
     "training_s": 75.5, "samples": 17256, "steps": 270, "peak_memory_gib": 0.93, "lr": 0.05,
     "accumulate_grad_batches": 1, "finished": true}

- ``time_s``: seconds of training up to the epoch's end, its evaluation included (start-up excluded; after a
  resume, the kept epochs' seconds plus this run's);
- ``samples_per_s``: the epoch's training samples on all data-parallel processes over the seconds from its
  start to its last batch's end (``RunState.batches_done_at``, stamped by the loop once an epoch; absent for an
  epoch that trained no batch);
- ``peak_memory_gib``: the process's peak so far, as the step lines measure it (allocated memory on CUDA, the
  resident set on the CPU; null where it cannot be had);
- ``test``: the numbers the evaluations published in ``logs["test"]`` by the epoch's end (nested as there);
- ``lr``: the rate the optimizer's first param group trains at before warm-up and schedules (its
  ``initial_lr``), after ``lr_scaling``; ``accumulate_grad_batches``: batches per optimizer step, as the run
  took them (an elastic resume may change them);
- ``finished``: whether training ended (false while it runs, and in the file a failed run leaves).

A batch-size study (:mod:`basetrainer.study`) reads this file: its name and keys are a contract.
"""
import json
import os
import time

from ..distributed import comm
from ..utils import throughput
from ..utils.file_utils import write_text_atomic
from .events import LATE, Callback

SUMMARY_FILE = "run_summary.json"


def numbers(values):
    """The numbers of ``values`` (a dict of published values), nested as there: plain floats, other values
    (tensors of more than one element, strings, objects) left out."""
    if isinstance(values, dict):
        kept = {str(key): numbers(value) for key, value in values.items()}
        return {key: value for key, value in kept.items() if value is not None and value != {}}
    if hasattr(values, "numel") and values.numel() == 1:
        values = values.item()
    if isinstance(values, (int, float)) and not isinstance(values, bool):
        return float(values)
    return None


class RunSummary(Callback):
    """Records each epoch's training time, speed, peak memory and evaluation into ``out_dir``/run_summary.json
    (main process; see the module docstring); with ``out_dir`` None, in ``epochs`` only."""

    priority = LATE  # after the recorders publish the evaluation
    state_key = "run_summary"

    def __init__(self, out_dir=None):
        super().__init__()
        self.out_dir = out_dir
        self.epochs = []  # the records so far, those of the runs a resumed one continues included
        self._seconds_before = 0.0  # the training time of the runs this one continues
        self._started = None  # this run's clock at on_train_begin
        self._lr = None
        self._epoch_started = self._samples_at_epoch = None

    @property
    def path(self):
        return os.path.join(self.out_dir, SUMMARY_FILE) if self.out_dir is not None else None

    def publishes(self):
        return ()

    def on_train_begin(self, logs=None):
        self._started = time.perf_counter()
        optimizer = self.trainer.optimizer
        if optimizer is not None and optimizer.param_groups:  # schedules keep the rate they started from
            group = optimizer.param_groups[0]
            self._lr = float(group.get("initial_lr", group["lr"]))

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_started = time.perf_counter()
        self._samples_at_epoch = self.state.samples_seen

    def on_epoch_end(self, epoch, logs=None):
        if self._started is None:
            return  # events fired by hand, outside a run
        record = {"epoch": epoch + 1, "time_s": self._seconds()}
        samples = (self.state.samples_seen - self._samples_at_epoch) * comm.get_data_parallel_world_size()
        done = self.state.batches_done_at  # None: no epoch's batches done in this run yet
        seconds = done - self._epoch_started if done is not None else 0.0
        if samples and seconds > 0:
            record["samples_per_s"] = samples / seconds
        record["peak_memory_gib"] = self._peak_memory_gib()
        record["test"] = numbers((logs or {}).get("test", {}))
        self.epochs.append(record)
        self._write(finished=False)

    def on_train_end(self, logs=None):
        if self._started is not None:
            self._write(finished=True)
            self._seconds_before, self._started = self._seconds(), None

    def summary(self, finished: bool) -> dict:
        """What ``run_summary.json`` holds."""
        state = self.state
        return {"epochs": self.epochs, "training_s": self._seconds(),
                "samples": state.samples_seen * comm.get_data_parallel_world_size(), "steps": state.global_step,
                "peak_memory_gib": self._peak_memory_gib(), "lr": self._lr,
                "accumulate_grad_batches": state.accumulate_grad_batches, "finished": finished}

    def _write(self, finished: bool) -> None:
        if self.out_dir is not None and comm.is_main_process():
            os.makedirs(self.out_dir, exist_ok=True)
            write_text_atomic(self.path, json.dumps(self.summary(finished), indent=1) + "\n")

    def _seconds(self) -> float:
        running = time.perf_counter() - self._started if self._started is not None else 0.0
        return self._seconds_before + running

    def _peak_memory_gib(self):
        peak = throughput.peak_memory(self.trainer.device) if self.trainer is not None else None
        return None if peak is None else peak / 2 ** 30

    def state_dict(self) -> dict:
        return {"epochs": self.epochs, "seconds": self._seconds()}

    def load_state_dict(self, state: dict) -> None:
        self.epochs = list(state.get("epochs", []))
        self._seconds_before = float(state.get("seconds", 0.0))
