"""Time to target: when an evaluation first reaches a value, and what training took to get there.

``target: {metric: test/Acc, value: 98.0}`` in the config (``mode: min`` for a loss; ``stop: true`` ends
training there). The trainer adds :class:`TimeToTarget` to its callbacks in ``build`` (in the engine, so
that every trainer has it; among ``callbacks``, so that its record travels in checkpoints), after checking
that some callback publishes the metric (:func:`time_to_target`).

At the end of the run the main process writes ``<work_dir>/log/target.json`` (without a work_dir, ``log/`` in
the current folder) with exactly the keys of ``TARGET_KEYS``: ``metric``, ``value`` and ``mode`` as
configured, ``reached`` (true or false), and ``reached_value``, ``time_s``, ``step``, ``epoch`` and ``samples``
(null when not reached). A run that does not end (it fails, or a stop signal interrupts it) leaves none: the
file a run in the same folder left before is removed when training begins. A batch-size study reads that
file: its name and keys are a contract.
"""
import json
import os
import time
from dataclasses import dataclass
from typing import Optional

from ..distributed import comm
from ..errors import ConfigError
from ..utils.file_utils import write_text_atomic
from ..utils.log import RESULT, get_logger
from ..utils.published import lookup, published_names
from .events import LATE, Callback

logger = get_logger()

TARGET_FILE = "target.json"
RECORD_KEYS = ("reached_value", "time_s", "step", "epoch", "samples")  # what reaching the target records
TARGET_KEYS = ("metric", "value", "mode", "reached", *RECORD_KEYS)  # target.json's keys, in this order
TEST_PREFIX = "test/"  # "test/Acc" names logs["test"]["Acc"] (unless a test set is named "test")


@dataclass(frozen=True)
class Target:
    """The ``target`` config key: ``metric`` (a name in ``logs["test"]``, as :func:`~basetrainer.utils.published.lookup`
    reads it) reaches ``value`` when it is at least ``value`` (``mode`` max) or at most ``value`` (min)."""

    metric: str
    value: float
    mode: str = "max"
    stop: bool = False

    @classmethod
    def from_setting(cls, values: Optional[dict]) -> Optional["Target"]:
        """The target of the checked ``target`` key (None: no target)."""
        if values is None:
            return None
        return cls(values["metric"], float(values["value"]), values["mode"], values["stop"])

    def reached_by(self, value: float) -> bool:
        return value >= self.value if self.mode == "max" else value <= self.value

    def read(self, results: dict) -> Optional[float]:
        """The metric in an evaluation's ``logs["test"]``, or None when it is not there."""
        value = lookup(results, self.metric)
        if value is None and self.metric.startswith(TEST_PREFIX):
            value = lookup(results, self.metric[len(TEST_PREFIX):])
        return value

    def describe(self) -> str:
        return f"{self.metric} {'>=' if self.mode == 'max' else '<='} {self.value:g}"


def time_to_target(target: Target, callbacks, set_names, work_dir) -> "TimeToTarget":
    """The callback that watches ``target``, once its metric is known to be published: by what the ``callbacks``
    declare (``publishes()``) in ``logs["test"]``, for each test set of ``set_names`` when there are several. A
    metric no callback publishes is a ConfigError naming those that are; when some callback handles evaluations
    and declares nothing (one written before ``publishes`` existed), the check waits for the first evaluation."""
    declared, undeclared = [], False
    for callback in callbacks:
        names = callback.publishes() if callable(getattr(callback, "publishes", None)) else None
        if names is None:
            undeclared = undeclared or _handles_evaluations(callback)
        else:
            declared += [name for name in names if name not in declared]
    if len(set_names) > 1:
        declared = [f"{set_name}/{name}" for set_name in set_names for name in declared]
    if target.read(dict.fromkeys(declared, 0.0)) is None and not undeclared:
        raise unknown_metric(target, declared)
    return TimeToTarget(target, os.path.join(work_dir or os.curdir, "log"), check_first_evaluation=undeclared)


def unknown_metric(target: Target, produced) -> ConfigError:
    listed = ", ".join(produced) if produced else "none (no test loader, or no recorder)"
    return ConfigError(f"config key 'target': no callback publishes the metric {target.metric!r}; the evaluations "
                       f"publish {listed}: set target.metric to one of them")


def _handles_evaluations(callback) -> bool:
    """Whether ``callback`` acts where evaluation results are published (``on_test_end``, ``on_evaluation_end``)."""
    handles = getattr(callback, "handles", None)
    events = ("on_test_end", "on_evaluation_end")
    if handles is not None:
        return any(handles(event) for event in events)
    return any(callable(getattr(callback, event, None)) for event in events)


class TimeToTarget(Callback):
    """Records the first evaluation that reaches the target: wall time since training began (from
    ``on_train_begin``: start-up excluded), optimizer step, epoch (from 1), samples seen by all data-parallel
    processes, and the value; ``stop`` then asks the trainer to stop (which saves a checkpoint as any stop does).

    The record goes to ``logs["target"]`` (every key of ``RECORD_KEYS``, None until reached, from
    ``on_train_begin`` on, so that the history files keep the same columns over the run), a result line when
    reached and at the end of training, and ``target.json`` in ``out_dir`` (main process). The time and the
    samples of the runs a resumed one continues are counted on (:meth:`state_dict`). Every rank reads the
    same reduced evaluation, so all ranks reach the target, and stop, at the same step.
    """

    priority = LATE  # after the recorders publish the evaluation; before the loggers write it and checkpoints save

    def __init__(self, target: Target, out_dir: str, check_first_evaluation: bool = False):
        super().__init__()
        self.target, self.out_dir = target, out_dir
        self.check_first_evaluation = check_first_evaluation
        self.record = None  # {RECORD_KEYS...} once reached
        self._seconds_before = 0.0  # training time of the runs this one continues
        self._samples_before = 0  # and the samples they saw, over all processes
        self._started = self._samples_at_start = None  # this run's start: clock, this process's samples_seen

    @property
    def path(self) -> str:
        return os.path.join(self.out_dir, TARGET_FILE)

    def publishes(self):
        return ()

    def on_train_begin(self, logs=None):
        self._started, self._samples_at_start = time.perf_counter(), self.state.samples_seen
        self._publish(logs)
        if comm.is_main_process():
            if os.path.isfile(self.path):  # an earlier run's: this one writes its own when it ends
                os.remove(self.path)
            logger.info("target %s: the time to target counts from here (start-up excluded)%s", self.target.describe(),
                        f", {self._seconds_before:.1f} s trained before the resume" if self._seconds_before else "")
        if self.record is not None and self.target.stop:  # a run resumed after it stopped at the target stays stopped
            self.trainer.request_stop()

    def on_evaluation_end(self, logs=None):
        if self._started is None or (self.record is not None and not self.check_first_evaluation):
            return  # outside training, or reached already
        results = (logs or {}).get("test", {})
        value = self.target.read(results)
        if self.check_first_evaluation and value is None:
            raise unknown_metric(self.target, published_names(results))
        self.check_first_evaluation = False
        if self.record is None and value is not None and self.target.reached_by(value):
            self._reach(value, logs)

    def on_train_end(self, logs=None):
        if comm.is_main_process():
            write_text_atomic(self.path, json.dumps(self.summary(), indent=1) + "\n")
            logger.info("%s; %s", self._line(), f"written to {self.path}", extra=RESULT)
        self._seconds_before, self._samples_before = self._totals()
        self._started = None  # an evaluation after training reaches nothing

    def summary(self) -> dict:
        """What ``target.json`` holds (``TARGET_KEYS``)."""
        record = self.record or dict.fromkeys(RECORD_KEYS)
        return {"metric": self.target.metric, "value": self.target.value, "mode": self.target.mode,
                "reached": self.record is not None, **record}

    def _reach(self, value, logs) -> None:
        state = self.state
        samples = comm.sum_over_ranks(state.samples_seen - self._samples_at_start)[0]  # every rank is here
        self.record = {"reached_value": value, "time_s": self._seconds(), "step": state.global_step,
                       "epoch": state.epoch + 1, "samples": self._samples_before + int(samples)}
        self._publish(logs)
        if comm.is_main_process():
            logger.info("%s%s", self._line(), "; stopping there (target.stop)" if self.target.stop else "",
                        extra=RESULT)
        if self.target.stop:
            self.trainer.request_stop()

    def _line(self) -> str:
        record = self.record
        if record is None:
            return f"target {self.target.describe()} not reached"
        return (f"target {self.target.describe()} reached ({record['reached_value']:.5g}) at epoch {record['epoch']}, "
                f"step {record['step']}, {record['samples']} samples, {record['time_s']:.2f} s after training began "
                f"(start-up excluded)")

    def _publish(self, logs) -> None:
        if logs is not None:
            logs["target"] = dict(self.record or dict.fromkeys(RECORD_KEYS))

    def _seconds(self) -> float:
        running = time.perf_counter() - self._started if self._started is not None else 0.0
        return self._seconds_before + running

    def _totals(self) -> tuple:
        """The training time and samples so far, without a collective (a checkpoint may be taken on one rank):
        this process's samples times the data-parallel processes, as the samplers give every process as many."""
        seen = 0 if self._started is None else self.state.samples_seen - self._samples_at_start
        return self._seconds(), self._samples_before + seen * comm.get_data_parallel_world_size()

    def state_dict(self) -> dict:
        seconds, samples = self._totals()
        return {"record": self.record, "seconds": seconds, "samples": samples}

    def load_state_dict(self, state: dict) -> None:
        self.record = state.get("record")
        self._seconds_before, self._samples_before = float(state["seconds"]), int(state["samples"])
