"""LogHistory: a run's log lines, and the records it hands to its loggers (TensorBoard, history files, trackers).

The callback wires the events to its parts, each of one job: :mod:`.throughput_window` (what the batches
between two lines achieved), :mod:`basetrainer.utils.eta` (the time left), :mod:`.log_lines` (the text),
:class:`~basetrainer.loggers.fanout.LoggerFanOut` (the loggers) and :mod:`basetrainer.loggers.curves`
(the picture at the end).
"""
import os
import time
import warnings

from ..distributed import comm
from ..engine.events import LOW, LOWEST, Callback, Event
from ..loggers import build_loggers
from ..loggers.base import flatten, flatten_params, numbers
from ..loggers.curves import write_training_curves
from ..loggers.fanout import LoggerFanOut
from ..utils import throughput
from ..utils.eta import EvaluationClock, seconds_left
from ..utils.log import RESULT, get_logger
from ..utils.plots import as_float
from .log_lines import epoch_line, evaluation_line, run_line, step_line
from .run_throughput import RunThroughput
from .throughput_window import ThroughputWindow


class LogHistory(Callback):
    """Reports the run, on the main process only: log lines to ``logger``, records to the loggers.

    - Every ``log_freq`` batches, a line::

          epoch 2/10 iter 340/1000 loss 0.4123 lr 0.01 samples/s 1520 data 12% mem 2.41GiB FLOP/s 212T
          MFU 21.4% eta 0:03:12

      (one line, here in two), and the same values as scalars for the loggers (``train/loss_step``, ``train/lr``,
      ``train/samples_per_s``, ``train/data_wait``, ``train/peak_memory_gib``,
      ``train/flops_per_s``, ``train/mfu``; see
      :class:`~.throughput_window.ThroughputWindow`), at the global batch ``epoch *
      batches_per_epoch + batch``. ``loss`` is the mean over the batches since the previous
      line and over all ranks (every rank joins one all-reduce at those batches only).
      ``eta`` includes the evaluations to come.
    - At each epoch end, a summary line and the epoch record to the loggers:
      ``{"epoch", "lr", "train": {...}, "test": {...}, "time_s", "samples_per_s", "peak_memory_gib"}``,
      every number of ``logs["train"]`` and ``logs["test"]`` nested as there, ``epoch``
      counting from 1; its step is the global batch of the epoch's last batch, on the same
      axis as the per-step scalars. The wall-clock figures (see ``_epoch_timing``) are
      what a comparison of runs by time needs (``basetrainer study``); beside them this run's rate so far,
      ``whole_run_samples_per_s`` and ``steady_samples_per_s`` (and ``whole_run_mfu``, ``steady_mfu`` where
      the step lines have an MFU; see ``_run_rates``). With a ``target`` (config
      key), ``"target"`` holds what reaching it recorded (``logs["target"]``, see
      :mod:`basetrainer.engine.target`; None until then). The trackers get the train and test
      values, the lr and, once reached, the target's figures.
    - At the end of training, after the checkpoints (``priorities``: the files ModelCheckpoint writes then,
      ``model_final.pth``, exist), ``training_curves.png`` (``plot``; needs matplotlib), then the run's last
      line, with its two rates (and MFU), named as such::

          trained 16896 samples in 0:01:10 | samples/s 241 over the whole run (start-up excluded;
          compilation, evaluations, checkpoints included), 380 in steady state (after the first 10
          batches, evaluations left out)

      (one line, here in three), and the same figures as scalars for the loggers (``train/whole_run_samples_per_s``, ...): the whole
      run's rate counts compilation, which made a compiled language model's look 10x slower than eager's
      while its steps were as fast (:class:`~.run_throughput.RunThroughput`).
    - Then each logger that takes files gets the picture and the ``artifacts`` that exist (the
      confusion matrix, the final weights), and the loggers are closed. When training raises, the
      loggers are closed with what they hold.

    ``loggers`` are names for :func:`~basetrainer.loggers.build_loggers` (tensorboard,
    csv, mlflow, wandb) or :class:`~basetrainer.loggers.base.Logger` objects; by default
    tensorboard (unless ``tensorboard=False``) and csv. A logger that fails is named in one
    line and dropped; the run goes on (:class:`~basetrainer.loggers.fanout.LoggerFanOut`).
    ``indicators`` choose the columns of history.csv and the panels of the curves. A fresh
    run also hands the loggers the trainer's config as flat parameters.

    The history and the loggers' states (a tracker's run id) travel in the checkpoint:
    after a resume the history files read as an uninterrupted run's, TensorBoard hides
    the steps run again, and the trackers continue the same run. Summary lines are
    results (``extra=RESULT``). ``is_main_process=False`` turns off all writing on this
    process (rank 0 is the only writer in any case).
    """

    priority = LOW
    priorities = {Event.TRAIN_END: LOWEST + 10}

    def __init__(self, log_dir, log_freq=1, logger=None, indicators=(), is_main_process=True, *,
                 tensorboard=True, plot=True, loggers=None, artifacts=()):
        super().__init__()
        self.log_dir = str(log_dir)
        self.log_freq = max(1, int(log_freq))
        self.logger = logger or get_logger()
        self.indicators = list(indicators or [])
        self.plot = plot
        self.artifacts = [os.fspath(path) for path in artifacts]
        if loggers is None:
            loggers = ["tensorboard", "csv"] if tensorboard else ["csv"]
        self.loggers = LoggerFanOut(build_loggers([item], self.log_dir, indicators=self.indicators)[0]
                                    if isinstance(item, str) else item for item in loggers)
        self.history = []  # one record per finished epoch, as the loggers got it
        self.curves_path = None  # the picture drawn at the end of training
        self._may_write = bool(is_main_process)
        self._window = ThroughputWindow()
        self._run = RunThroughput()
        self._evaluations = EvaluationClock()
        self._first_step = 0  # the global batch of this epoch's batch 0
        self._next_first_step = 0  # the same for the next epoch, when the loader has no length
        self._epoch_started = self._last_batch_end = time.perf_counter()
        self._training_started = None  # this run's start of training, after its start-up and resume
        self._trained_before = 0.0  # a resumed run's training seconds up to the last epoch it keeps
        self._samples_before_epoch = 0

    def _writes(self) -> bool:
        return self._may_write and comm.is_main_process()

    def _device(self):
        trainer = self.trainer
        return trainer.device if trainer is not None else None

    # ------------------------------------------------------------------ events
    def publishes(self):
        return ()  # reads the evaluation, publishes nothing in it

    def on_train_begin(self, logs=None):
        state, trainer = self.state, self.trainer
        if state is not None:
            start_epoch, start_batch, steps = state.start_epoch, state.start_batch, state.batches_per_epoch
        else:
            start_epoch, start_batch, steps = int((logs or {}).get("epoch", 0)), 0, 0
        self.history = [record for record in self.history if record["epoch"] <= start_epoch]
        self._trained_before = self.history[-1].get("time_s", 0.0) if self.history else 0.0
        self._training_started = time.perf_counter()
        if state is not None:
            self._run.train_begin(state)
        if trainer is not None:
            self._window.start(trainer.model, trainer.device, trainer.options.amp)
        if not self._writes():
            return
        resumed = bool(start_epoch or start_batch)
        self.loggers.start(self.history, resumed, start_epoch * steps + start_batch if steps else None)
        if not resumed and trainer is not None:
            self.loggers.log_params(flatten_params(trainer.cfg))

    def on_epoch_begin(self, epoch, logs=None):
        state = self.state
        steps = state.batches_per_epoch if state is not None else 0
        self._first_step = epoch * steps if steps else self._next_first_step
        self._epoch_started = self._last_batch_end = time.perf_counter()
        self._samples_before_epoch = state.samples_seen if state is not None else 0
        self._window.reset(state, self._device(), state.start_batch if state is not None else 0)
        self._run.epoch_begin()

    def on_batch_begin(self, batch, logs=None):
        self._window.batch_begin()

    def on_batch_end(self, batch, logs=None):
        self._window.batch_end()
        self._last_batch_end = time.perf_counter()
        if self.state is not None:
            self._run.batch_end(self.state)
        if (batch + 1) % self.log_freq == 0 and self.state is not None:
            self._log_step(batch)

    def on_test_begin(self, logs=None):
        self._evaluations.test_begin()
        self._run.test_begin()

    def on_evaluation_end(self, logs=None):
        self._evaluations.evaluation_end()
        self._run.evaluation_end()
        state = self.state
        if state is None or not self.trainer.options.eval_every_n_iters or not self._writes():
            return
        results = flatten(numbers((logs or {}).get("test", {})))
        if results:  # evaluated every N steps: the results at this step, not at an epoch end
            self.logger.info(evaluation_line(state, results), extra=RESULT)
            self.loggers.log_metrics({f"test/{name}": value for name, value in results.items()},
                                     self._first_step + state.batch)

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        state = self.state
        last_step = self._first_step + state.batch if state is not None else epoch
        self._next_first_step = last_step + 1
        record = {"epoch": epoch + 1, "lr": as_float(logs.get("lr")),
                  "train": numbers(logs.get("train", {})), "test": numbers(logs.get("test", {})),
                  **self._epoch_timing(state), **self._run_rates(state)}
        if "target" in logs:
            record["target"] = dict(logs["target"])
        self.history.append(record)
        if not self._writes():
            return
        seconds = time.perf_counter() - self._epoch_started
        self.logger.info(epoch_line(record, seconds, state.max_epochs if state is not None else None), extra=RESULT)
        self.loggers.log_epoch(record, last_step)

    def on_train_end(self, logs=None):
        self._window.stop_counting()
        if not self._writes():
            return
        if self.plot:
            self.curves_path = write_training_curves(self.history, self.log_dir, self.indicators)
        if self.state is not None:  # the run's last line: what follows is closing files and processes
            rates = self._run_rates(self.state)
            self.logger.info(run_line(self._run.samples(self.state), self._run.seconds(), rates,
                                      self._run.steady_after), extra=RESULT)
            self.loggers.log_metrics({f"train/{name}": value for name, value in rates.items()},
                                     max(self._next_first_step - 1, 0))
        self.end_loggers()

    def on_exception(self, error, logs=None):
        self._window.stop_counting()
        if self._writes():
            self.loggers.close(failed=True)

    def end_loggers(self) -> None:
        """Hands the loggers the curves picture and the ``artifacts`` that exist, then closes them (main
        process); once: the loggers of a run are closed, later calls do nothing."""
        if self._writes():
            self.loggers.log_artifacts([self.curves_path, *self.artifacts])
            self.loggers.close()

    def _epoch_timing(self, state) -> dict:
        """The epoch record's wall-clock figures: ``time_s``, the seconds of training up to this epoch's end,
        its evaluation included (start-up excluded; after a resume, the kept epochs' seconds plus this run's);
        ``samples_per_s``, the epoch's training samples on all processes (each process's times the
        data-parallel processes: the sampler gives each as many) over the seconds from its start to its last
        batch's end; ``peak_memory_gib``, as the step lines measure it. Each is left out where it cannot be had."""
        if self._training_started is None:  # events fired by hand, without on_train_begin
            return {}
        timing = {"time_s": self._trained_before + time.perf_counter() - self._training_started}
        if state is not None:
            samples = (state.samples_seen - self._samples_before_epoch) * comm.get_data_parallel_world_size()
            seconds = self._last_batch_end - self._epoch_started
            if samples and seconds > 0:
                timing["samples_per_s"] = samples / seconds
        memory = throughput.peak_memory(self._device()) if self._device() is not None else None
        if memory is not None:
            timing["peak_memory_gib"] = memory / 2 ** 30
        return timing

    def _run_rates(self, state) -> dict:
        """``whole_run_samples_per_s`` and ``steady_samples_per_s``, this run's so far (see
        :class:`~.run_throughput.RunThroughput`), and ``whole_run_mfu``, ``steady_mfu`` where the step lines
        have an MFU; each left out where it cannot be had."""
        if state is None:
            return {}
        rates = {}
        for kind, rate in (("whole_run", self._run.whole_run(state)), ("steady", self._run.steady(state))):
            if rate is not None:
                rates[f"{kind}_samples_per_s"] = rate
                rates.update({f"{kind}_mfu": mfu for name, mfu in self._window.model_flops(rate).items()
                              if name == "mfu"})
        return rates

    def _log_step(self, batch):
        state, device = self.state, self.trainer.device
        scalars, seconds_per_batch = self._window.close(state, device, batch)
        if not self._writes() or scalars is None:  # None: every batch of the window was a skipped step
            return
        eta = seconds_left(state, batch, seconds_per_batch, self.trainer.options.eval_every_n_iters,
                           self._evaluations.last_seconds)
        self.logger.info(step_line(state, batch, scalars, eta))
        self.loggers.log_metrics(scalars, self._first_step + batch)

    # ------------------------------------------------------------------ state
    def state_dict(self):
        return {"history": self.history, "epoch_numbers_from": 1, "loggers": self.loggers.state_dict()}

    def load_state_dict(self, state):
        history = list(state.get("history", []))
        if state.get("epoch_numbers_from", 0) != 1:  # saved before epochs were numbered from 1
            history = [{**record, "epoch": record["epoch"] + 1} for record in history]
        self.history = history
        self.loggers.load_state_dict(state.get("loggers", {}))


class EndLoggers(Callback):
    """No longer needed, and harmless where a script still lists it: :class:`LogHistory` ends its
    loggers after the checkpoints by itself (``LogHistory.priorities``), once."""

    def __init__(self, history: LogHistory):
        super().__init__()
        self.history = history
        warnings.warn("EndLoggers is no longer needed: LogHistory ends its loggers after the checkpoints by itself; "
                      "remove it from the callbacks", DeprecationWarning, stacklevel=2)
