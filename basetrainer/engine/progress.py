"""The trainer's progress output, main process only: tqdm bars on a terminal, plain lines in a file.

It goes to the console (stderr; in a replica group, the console kept apart from the group's log file:
:mod:`basetrainer.utils.console`). ``progress: auto`` (the default) shows bars when stderr is a terminal and lines otherwise (SLURM, CI,
``nohup``, ``> log 2>&1``), where each redraw of a bar would add a frame and carriage returns to the
file; ``true`` forces the bars, ``false`` shows nothing (the trainer then adds no ProgressBar).
"""
import time

from tqdm.auto import tqdm

from ..distributed import comm
from ..utils import console
from ..utils.eta import EvaluationClock, format_seconds, seconds_left
from .events import LOW, Callback

LINE_NAMES = {"samples_s": "samples/s"}  # a bar's postfix names are keywords; a line says them as written


class ProgressBar(Callback):
    """Shows the running loss (mean since the epoch began, over all ranks), the lr, samples/s and the time left.

    Training for epochs, a bar per epoch counts its batches; training for ``max_iters``,
    one bar counts optimizer steps. The loss and the sample count come from the run
    state's loss tally, read every ``refresh_every`` batches, at an epoch's last batch and at the last step:
    the same batches on every rank, which join one all-reduce there, so the bar costs no
    host sync on other steps. An evaluation, also one in the middle of an epoch, has a bar
    of its own. The trainer adds this callback itself unless ``progress: false``.

    Where stderr is no terminal (and ``progress`` is ``auto``), the same batches write one
    line each instead, with the same fields and no carriage return::

        Train epoch 2/12 | 50/90 | loss 0.4123 | lr 0.05 | samples/s 1520 | eta 0:03:12

    (``eta``: the whole run, the evaluations to come included.)
    """

    priority = LOW
    mininterval = 0.5  # seconds between redraws of a bar (tqdm's own throttle)

    def __init__(self, refresh_every: int = 50):
        super().__init__()
        self.refresh_every = refresh_every
        self._train_bar = self._test_bar = None
        self._lines = False  # plain lines instead of bars
        self._train_desc, self._train_total = "Train", None  # what the training bar, or line, is about
        self._evaluations = EvaluationClock()

    def publishes(self):
        return ()  # shows the evaluation's progress, publishes nothing in it

    def on_train_begin(self, logs=None):
        state, mode = self.state, self.trainer.options.progress
        self._lines = mode == "auto" and not console.stream().isatty()
        if state.max_steps is not None:
            self._train_bar = self._training_bar(state.max_steps, "Train steps", state.global_step)

    def on_epoch_begin(self, epoch, logs=None):
        state = self.state
        if state.max_steps is None:
            _close(self._train_bar)
            self._train_bar = self._training_bar(state.batches_per_epoch or None,
                                                 f"Train epoch {epoch + 1}/{state.max_epochs}", state.start_batch)
        self._samples_before, self._started = state.loss_tally.samples, time.perf_counter()

    def on_batch_end(self, batch, logs=None):
        state, done = self.state, batch + 1
        bar = self._train_bar
        position = state.global_step if state.max_steps is not None else done
        if done % self.refresh_every == 0 or done == state.batches_per_epoch or state.global_step == state.max_steps:
            fields = self._fields(batch)
            if self._lines:
                self._write_line(position, fields)
            else:
                bar.set_postfix(**fields, refresh=False)
        bar.update(position - bar.n)

    def on_test_begin(self, logs=None):
        self._evaluations.test_begin()
        loader = self.trainer.loader("test")
        if loader is not None and not self._lines:
            name = self.state.eval_set
            self._test_bar = self._bar(len(loader) if hasattr(loader, "__len__") else None,
                                       f"Test {name}" if name else "Test")

    def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
        if self._test_bar is not None:
            self._test_bar.update(1)

    def on_test_end(self, logs=None):
        self._test_bar = _close(self._test_bar)

    def on_evaluation_end(self, logs=None):
        self._evaluations.evaluation_end()

    def on_epoch_end(self, epoch, logs=None):
        if self.state.max_steps is None:
            self._train_bar = _close(self._train_bar)

    def on_train_end(self, logs=None):
        self._train_bar = _close(self._train_bar)

    def on_exception(self, error, logs=None):
        self._test_bar = _close(self._test_bar)  # the error's message then starts on a line of its own
        self._train_bar = _close(self._train_bar)

    def _training_bar(self, total, desc, initial):
        self._train_desc, self._train_total = desc, total
        return self._bar(total, desc, initial)

    def _bar(self, total, desc, initial=0):
        """A tqdm bar, drawn on the main process unless lines are written instead."""
        return tqdm(total=total, initial=initial, desc=desc, disable=self._lines or not comm.is_main_process(),
                    file=console.stream(),
                    dynamic_ncols=True, mininterval=self.mininterval, leave=True)

    def _fields(self, batch) -> dict:
        """The loss, lr, samples/s and time left, as the bar shows them (every rank: one all-reduce)."""
        state = self.state
        loss_sum, _, batches, samples = state.loss_tally.totals(self.trainer.device)
        loss, count = comm.sum_over_ranks(loss_sum, batches)
        elapsed = max(time.perf_counter() - self._started, 1e-9)
        speed = (samples - self._samples_before) * comm.get_data_parallel_world_size() / elapsed
        fields = {"loss": f"{loss / count:.4g}"} if count else {}
        fields.update(lr=f"{state.lr:.3g}", samples_s=f"{speed:.0f}")
        eta = seconds_left(state, batch, elapsed / max(1, batch + 1 - state.start_batch),
                           self.trainer.options.eval_every_n_iters, self._evaluations.last_seconds)
        if eta is not None:
            fields["eta"] = format_seconds(eta)
        return fields

    def _write_line(self, position, fields) -> None:
        if comm.is_main_process():
            total = f"/{self._train_total}" if self._train_total else ""
            values = " | ".join(f"{LINE_NAMES.get(name, name)} {value}" for name, value in fields.items())
            print(f"{self._train_desc} | {position}{total} | {values}", file=console.stream(), flush=True)


def _close(bar):
    """Closes ``bar`` if there is one; returns None, for ``self._bar = _close(self._bar)``."""
    if bar is not None:
        bar.close()
    return None
