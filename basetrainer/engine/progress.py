"""The trainer's progress bar: one tqdm bar per epoch (or one over all steps) and one per evaluation, main process only."""
import time

from tqdm.auto import tqdm

from ..distributed import comm
from .events import LOW, Callback


class ProgressBar(Callback):
    """Shows the running loss (mean since the epoch began, over all ranks), the lr and samples/s.

    Training for epochs, a bar per epoch counts its batches; training for ``max_iters``,
    one bar counts optimizer steps. The loss and the sample count come from the run
    state's loss tally, read every ``refresh_every`` batches and at an epoch's last batch:
    the same batches on every rank, which join one all-reduce there, so the bar costs no
    host sync on other steps. An evaluation, also one in the middle of an epoch, has a bar
    of its own. The trainer adds this callback itself unless ``progress: false``.
    """

    priority = LOW
    mininterval = 0.5  # seconds between redraws of a bar (tqdm's own throttle)

    def __init__(self, refresh_every: int = 50):
        super().__init__()
        self.refresh_every = refresh_every
        self._train_bar = self._test_bar = None

    def on_train_begin(self, logs=None):
        state = self.state
        if state.max_steps is not None:
            self._train_bar = self._bar(state.max_steps, "Train steps", state.global_step)

    def on_epoch_begin(self, epoch, logs=None):
        state = self.state
        if state.max_steps is None:
            _close(self._train_bar)
            self._train_bar = self._bar(state.batches_per_epoch or None,
                                        f"Train epoch {epoch + 1}/{state.max_epochs}", state.start_batch)
        self._samples_before, self._started = state.loss_tally.samples, time.perf_counter()

    def on_batch_end(self, batch, logs=None):
        state, done = self.state, batch + 1
        if done % self.refresh_every == 0 or done == state.batches_per_epoch:
            self._refresh()
        bar = self._train_bar
        bar.update((state.global_step if state.max_steps is not None else done) - bar.n)

    def on_test_begin(self, logs=None):
        loader = self.trainer.loader("test")
        if loader is not None:
            name = self.state.eval_set
            self._test_bar = self._bar(len(loader) if hasattr(loader, "__len__") else None,
                                  f"Test {name}" if name else "Test")

    def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
        self._test_bar.update(1)

    def on_test_end(self, logs=None):
        self._test_bar = _close(self._test_bar)

    def on_epoch_end(self, epoch, logs=None):
        if self.state.max_steps is None:
            self._train_bar = _close(self._train_bar)

    def on_train_end(self, logs=None):
        self._train_bar = _close(self._train_bar)

    def on_exception(self, error, logs=None):
        self._test_bar = _close(self._test_bar)  # the error's message then starts on a line of its own
        self._train_bar = _close(self._train_bar)

    def _bar(self, total, desc, initial=0):
        return tqdm(total=total, initial=initial, desc=desc, disable=not comm.is_main_process(), dynamic_ncols=True,
                    mininterval=self.mininterval, leave=True)

    def _refresh(self):
        state = self.state
        loss_sum, _, batches, samples = state.loss_tally.totals(self.trainer.device)
        loss, count = comm.sum_over_ranks(loss_sum, batches)
        elapsed = max(time.perf_counter() - self._started, 1e-9)
        speed = (samples - self._samples_before) * comm.get_world_size() / elapsed
        postfix = {"loss": f"{loss / count:.4g}"} if count else {}
        self._train_bar.set_postfix(**postfix, lr=f"{state.lr:.3g}", samples_s=f"{speed:.0f}", refresh=False)


def _close(bar):
    """Closes ``bar`` if there is one; returns None, for ``self._bar = _close(self._bar)``."""
    if bar is not None:
        bar.close()
    return None
