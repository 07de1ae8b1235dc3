"""LogHistory: a run's log lines, and the records it hands to its loggers (TensorBoard, history files, trackers)."""
import datetime
import os
import time

from ..distributed import comm
from ..engine.events import LOW, LOWEST, Callback
from ..loggers import build_loggers
from ..loggers.base import flatten, flatten_params, numbers
from ..loggers.curves import write_training_curves
from ..parallel import unwrap_model
from ..utils import throughput
from ..utils.log import RESULT, get_logger
from ..utils.plots import as_float


class LogHistory(Callback):
    """Reports the run, on the main process only: log lines to ``logger``, records to the loggers.

    - Every ``log_freq`` batches, a line::

          epoch 2/10 iter 340/1000 loss 0.4123 lr 0.01 samples/s 1520 data 12% mem 2.41GiB FLOP/s 212T MFU 21.4% eta 0:03:12

      and the same values as scalars for the loggers: ``train/loss_step``, ``train/lr``,
      ``train/samples_per_s``, ``train/data_wait``, ``train/peak_memory_gib``,
      ``train/flops_per_s`` and ``train/mfu``, at the global batch ``epoch *
      batches_per_epoch + batch``. ``loss`` is the mean over the batches since the
      previous line and over all ranks (every rank joins one all-reduce at those batches
      only), read from the run state's loss tally, so nothing is recorded here per step;
      ``samples/s`` counts all ranks; ``data`` is the share of the time spent waiting for
      batches (from one batch's end to the next one's start); ``mem`` is this process's
      peak memory (allocated GPU memory on CUDA, the resident set on the CPU). ``FLOP/s``
      is the model's training FLOPs per sample (3x one forward pass, counted once on the
      first batch, see :class:`~basetrainer.utils.throughput.ForwardFlops`) times
      samples/s, and ``MFU`` their share of the GPUs' peak, for the GPUs
      :data:`~basetrainer.utils.throughput.PEAK_TFLOPS` knows; either is left out where
      it cannot be had. ``eta`` includes the evaluations to come.
    - At each epoch end, a summary line and the epoch record to the loggers:
      ``{"epoch", "lr", "train": {...}, "test": {...}}``, every number of ``logs["train"]``
      and ``logs["test"]`` nested as there, ``epoch`` counting from 1; its step is the
      global batch of the epoch's last batch, on the same axis as the per-step scalars.
    - At the end of training, ``training_curves.png`` (``plot``; needs matplotlib); then
      each logger that takes files gets it and the ``artifacts`` that exist (the
      confusion matrix, the final weights) and is closed: here, or after the checkpoints
      when an :class:`EndLoggers` is listed (the final weights are written then). When
      training raises, the loggers are closed with what they hold.

    ``loggers`` are names for :func:`~basetrainer.loggers.build_loggers` (tensorboard,
    csv, mlflow, wandb) or :class:`~basetrainer.loggers.base.Logger` objects; by default
    tensorboard (unless ``tensorboard=False``) and csv. ``indicators`` choose the columns
    of history.csv and the panels of the curves. A fresh run also hands the loggers the
    trainer's config as flat parameters.

    The history and the loggers' states (a tracker's run id) travel in the checkpoint:
    after a resume the history files read as an uninterrupted run's, TensorBoard hides
    the steps run again, and the trackers continue the same run. Summary lines are
    results (``extra=RESULT``). ``is_main_process=False`` turns off all writing on this
    process (rank 0 is the only writer in any case).
    """

    priority = LOW

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
        self.loggers = [build_loggers([item], self.log_dir, indicators=self.indicators)[0] if isinstance(item, str)
                        else item for item in loggers]
        self.history = []  # one record per finished epoch, as the loggers got it
        self.curves_path = None  # the picture drawn at the end of training
        self.ends_loggers = True  # False when an EndLoggers callback ends them after the checkpoints
        self._may_write = bool(is_main_process)
        self._flops = None  # counts the model's FLOPs on the first batch, then None
        self._flops_per_sample = self._peak_flops = None
        self._first_step = 0  # the global batch of this epoch's batch 0
        self._next_first_step = 0  # the same for the next epoch, when the loader has no length
        self._last_test_seconds = 0.0
        self._epoch_started = time.perf_counter()
        self._test_started = None  # when the current evaluation's first test set began
        self._reset_window(self._epoch_started)

    def _writes(self) -> bool:
        return self._may_write and comm.is_main_process()

    # ------------------------------------------------------------------ events
    def on_train_begin(self, logs=None):
        state, trainer = self.state, self.trainer
        if state is not None:
            start_epoch, start_batch, steps = state.start_epoch, state.start_batch, state.batches_per_epoch
        else:
            start_epoch, start_batch, steps = int((logs or {}).get("epoch", 0)), 0, 0
        self.history = [record for record in self.history if record["epoch"] <= start_epoch]
        if trainer is not None:
            self._flops = throughput.ForwardFlops(trainer.model, unwrap_model(trainer.model))
            self._peak_flops = throughput.peak_flops(trainer.device, trainer.options.amp)
        if not self._writes():
            return
        resumed = bool(start_epoch or start_batch)
        for logger in self.loggers:
            logger.start(self.history, resumed, start_epoch * steps + start_batch if steps else None)
        if not resumed and trainer is not None:
            params = flatten_params(trainer.cfg)
            for logger in self.loggers:
                logger.log_params(params)

    def on_epoch_begin(self, epoch, logs=None):
        state = self.state
        steps = state.batches_per_epoch if state is not None else 0
        self._first_step = epoch * steps if steps else self._next_first_step
        now = time.perf_counter()
        self._epoch_started = now
        self._reset_window(now, state.start_batch if state is not None else 0)

    def on_batch_begin(self, batch, logs=None):
        self._data_seconds += time.perf_counter() - self._last_batch_end

    def on_batch_end(self, batch, logs=None):
        self._last_batch_end = time.perf_counter()
        if (batch + 1) % self.log_freq == 0:
            self._log_step(batch)

    def on_test_begin(self, logs=None):
        if self._test_started is None:  # the first test set of this evaluation
            self._test_started = time.perf_counter()

    def on_evaluation_end(self, logs=None):
        if self._test_started is not None:
            self._last_test_seconds = time.perf_counter() - self._test_started
        self._test_started = None
        state = self.state
        if state is None or not self.trainer.options.eval_every_n_iters or not self._writes():
            return
        results = flatten(numbers((logs or {}).get("test", {})))
        if results:  # evaluated every N steps: the results at this step, not at an epoch end
            self.logger.info(f"step {state.global_step}" + (f"/{state.max_steps}" if state.max_steps else "")
                             + " test " + " ".join(f"{name} {value:.5g}" for name, value in results.items()),
                             extra=RESULT)
            for logger in self.loggers:
                logger.log_metrics({f"test/{name}": value for name, value in results.items()},
                                   self._first_step + state.batch)

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        state = self.state
        last_step = self._first_step + state.batch if state is not None else epoch
        self._next_first_step = last_step + 1
        record = {"epoch": epoch + 1, "lr": as_float(logs.get("lr")),
                  "train": numbers(logs.get("train", {})), "test": numbers(logs.get("test", {}))}
        self.history.append(record)
        if not self._writes():
            return
        self._log_epoch(record, time.perf_counter() - self._epoch_started)
        for logger in self.loggers:
            logger.log_epoch(record, last_step)

    def on_train_end(self, logs=None):
        self._stop_counting()
        if not self._writes():
            return
        if self.plot:
            self.curves_path = write_training_curves(self.history, self.log_dir, self.indicators)
        if self.ends_loggers:
            self.end_loggers()

    def on_exception(self, error, logs=None):
        self._stop_counting()
        if self._writes():
            for logger in self.loggers:
                logger.close(failed=True)

    def end_loggers(self) -> None:
        """Hands the loggers the curves picture and the ``artifacts`` that exist, then closes them (main process)."""
        if not self._writes():
            return
        files = [path for path in (self.curves_path, *self.artifacts) if path and os.path.isfile(path)]
        for logger in self.loggers:
            for path in files:
                logger.log_artifact(path)
            logger.close()

    def _stop_counting(self):
        if self._flops is not None:
            self._flops.remove()
            self._flops = None

    # ------------------------------------------------------------------ per-step line
    def _reset_window(self, now, first_batch=0, tally_now=None):
        """Starts the window of the next log line at ``first_batch``: its losses are what the
        run state's loss tally sums from here on. ``tally_now``: the tally's ``(loss_sum,
        batches, samples)`` if the caller has just read them, else they are read here."""
        state = self.state
        if tally_now is None and state is not None:
            loss_sum, _, batches, samples = state.loss_tally.totals(self.trainer.device)
            tally_now = (loss_sum, batches, samples)
        self._tally_before = tally_now
        self._window_first_batch = first_batch
        self._data_seconds = 0.0
        self._window_started = self._last_batch_end = now

    def _log_step(self, batch):
        state = self.state
        if state is None:
            return
        sum_before, batches_before, samples_before = self._tally_before
        loss_sum, _, batches, samples = state.loss_tally.totals(self.trainer.device)
        tally_now = (loss_sum, batches, samples)
        loss_sum, count, samples = comm.sum_over_ranks(loss_sum - sum_before, batches - batches_before,
                                                       samples - samples_before)
        elapsed = max(time.perf_counter() - self._window_started, 1e-9)
        data_share = self._data_seconds / elapsed
        seconds_per_batch = elapsed / (batch + 1 - self._window_first_batch)
        if self._flops is not None:  # on every rank: a sharded model's forward gathers its parameters
            self._flops_per_sample = self._flops.count()
            self._flops = None
        self._reset_window(time.perf_counter(), batch + 1, tally_now)  # the counting is in no window
        if not self._writes() or not count:  # count 0: every batch of the window was a skipped step
            return
        scalars = self._step_scalars(loss_sum / count, samples / elapsed, data_share)
        self.logger.info(self._step_line(batch, scalars, self._eta(batch, seconds_per_batch)))
        for logger in self.loggers:
            logger.log_metrics(scalars, self._first_step + batch)

    def _step_scalars(self, loss, speed, data_share) -> dict:
        scalars = {"train/loss_step": loss, "train/lr": as_float(self.state.lr), "train/samples_per_s": speed,
                   "train/data_wait": data_share}
        memory = throughput.peak_memory(self.trainer.device)
        if memory is not None:
            scalars["train/peak_memory_gib"] = memory / 2 ** 30
        if self._flops_per_sample:
            flops = 3 * self._flops_per_sample * speed  # forward and backward: ~3 forward passes
            scalars["train/flops_per_s"] = flops
            if self._peak_flops:
                scalars["train/mfu"] = flops / (self._peak_flops * comm.get_world_size())
        return scalars

    def _step_line(self, batch, scalars, eta) -> str:
        state = self.state
        steps = state.batches_per_epoch
        if state.max_steps is not None:
            where = [f"step {state.global_step}/{state.max_steps}"]
        else:
            where = [f"epoch {state.epoch + 1}/{state.max_epochs}",
                     f"iter {batch + 1}/{steps}" if steps else f"iter {batch + 1}"]
        parts = [*where,
                 f"loss {scalars['train/loss_step']:.4f}", f"lr {scalars['train/lr']:.4g}",
                 f"samples/s {scalars['train/samples_per_s']:.0f}", f"data {100 * scalars['train/data_wait']:.0f}%"]
        if "train/peak_memory_gib" in scalars:
            parts.append(f"mem {scalars['train/peak_memory_gib']:.2f}GiB")
        if "train/flops_per_s" in scalars:
            parts.append(f"FLOP/s {_si(scalars['train/flops_per_s'])}")
        if "train/mfu" in scalars:
            parts.append(f"MFU {100 * scalars['train/mfu']:.1f}%")
        if eta is not None:
            parts.append(f"eta {datetime.timedelta(seconds=round(eta))}")
        return " ".join(parts)

    def _eta(self, batch, seconds_per_batch):
        """Seconds left: the remaining batches at the current pace, and the evaluations still to come."""
        state, options = self.state, self.trainer.options
        steps, per_step = state.batches_per_epoch, state.accumulate_grad_batches
        if state.max_steps is not None:
            batches_left = (state.max_steps - state.global_step) * per_step
        elif steps:
            batches_left = (state.max_epochs - state.epoch - 1) * steps + steps - batch - 1
        else:
            return None
        every = options.eval_every_n_iters
        evaluations = -(-batches_left // (every * per_step)) if every else state.max_epochs - state.epoch
        return batches_left * seconds_per_batch + evaluations * self._last_test_seconds

    # ------------------------------------------------------------------ per-epoch line
    def _log_epoch(self, record, seconds):
        state = self.state
        total = f"/{state.max_epochs}" if state is not None else ""
        parts = [f"epoch {record['epoch']}{total} done in {datetime.timedelta(seconds=round(seconds))}",
                 f"lr {record['lr']:.4g}"]
        for phase in ("train", "test"):
            values = flatten(record[phase])
            if values:
                parts.append(phase + " " + " ".join(f"{name} {value:.5g}" for name, value in values.items()))
        self.logger.info(" | ".join(parts), extra=RESULT)

    # ------------------------------------------------------------------ state
    def state_dict(self):
        loggers = {logger.name: logger.state_dict() for logger in self.loggers}
        return {"history": self.history, "epoch_numbers_from": 1,
                "loggers": {name: state for name, state in loggers.items() if state}}

    def load_state_dict(self, state):
        history = list(state.get("history", []))
        if state.get("epoch_numbers_from", 0) != 1:  # saved before epochs were numbered from 1
            history = [{**record, "epoch": record["epoch"] + 1} for record in history]
        self.history = history
        for logger in self.loggers:
            logger.load_state_dict(state.get("loggers", {}).get(logger.name, {}))


class EndLoggers(Callback):
    """Ends a LogHistory's loggers after the checkpoints, so that the files ModelCheckpoint
    writes at the end of training (``model_final.pth``) reach them as artifacts::

        history = LogHistory(log_dir, loggers=..., artifacts=[os.path.join(model_dir, "model_final.pth")])
        callbacks = [..., history, ModelCheckpoint(model_dir=model_dir), EndLoggers(history)]

    LogHistory writes each epoch before the checkpoint saves (its history travels in it),
    so at the end of training it also comes before ModelCheckpoint; once this callback is
    attached, LogHistory leaves the end of its loggers to it.
    """

    priority = LOWEST + 10

    def __init__(self, history: LogHistory):
        super().__init__()
        self.history = history

    def attach(self, trainer) -> None:
        super().attach(trainer)
        self.history.ends_loggers = False

    def on_train_end(self, logs=None):
        self.history.end_loggers()


def _si(value: float) -> str:
    """``2.5e12`` -> ``"2.5T"``."""
    for prefix in ("", "k", "M", "G", "T"):
        if abs(value) < 1000:
            return f"{value:.3g}{prefix}"
        value /= 1000
    return f"{value:.3g}P"
