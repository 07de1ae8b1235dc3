"""The trainer's progress bar: one tqdm bar per epoch and per evaluation, on the main process."""
import time

from tqdm.auto import tqdm

from . import comm
from .events import LOW, Callback


class ProgressBar(Callback):
    """Shows the running loss (mean since the epoch began, over all ranks), the lr and samples/s.

    The loss and the sample count come from the run state's loss tally, read every
    ``refresh_every`` batches and at the epoch's last batch: the same batches on every
    rank, which join one all-reduce there, so the bar costs no host sync on other steps.
    The trainer adds this callback itself unless ``progress: false``.
    """

    priority = LOW

    def __init__(self, refresh_every: int = 50):
        super().__init__()
        self.refresh_every = refresh_every
        self._bar = None

    def on_epoch_begin(self, epoch, logs=None):
        state = self.state
        self._open(state.batches_per_epoch or None, f"Train epoch {epoch + 1}/{state.max_epochs}", state.start_batch)
        self._samples_before, self._started = state.loss_tally.samples, time.perf_counter()

    def on_batch_end(self, batch, logs=None):
        done = batch + 1
        if done % self.refresh_every == 0 or done == self.state.batches_per_epoch:
            self._refresh()
        self._bar.update(done - self._bar.n)

    def on_test_begin(self, logs=None):
        self._close()
        loader = self.trainer.test_loader
        if loader is not None:
            self._open(len(loader) if hasattr(loader, "__len__") else None, "Test ")

    def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
        self._bar.update(1)

    def on_test_end(self, logs=None):
        self._close()

    def on_train_end(self, logs=None):
        self._close()

    def on_exception(self, error, logs=None):
        self._close()  # the error's message then starts on a line of its own

    def _refresh(self):
        state = self.state
        loss_sum, _, batches, samples = state.loss_tally.totals(self.trainer.device)
        loss, count = comm.sum_over_ranks(loss_sum, batches)
        elapsed = max(time.perf_counter() - self._started, 1e-9)
        speed = (samples - self._samples_before) * comm.get_world_size() / elapsed
        postfix = {"loss": f"{loss / count:.4g}"} if count else {}
        self._bar.set_postfix(**postfix, lr=f"{state.lr:.3g}", samples_s=f"{speed:.0f}", refresh=False)

    def _open(self, total, desc, initial=0):
        self._close()
        self._bar = tqdm(total=total, initial=initial, desc=desc, disable=not comm.is_main_process(),
                         dynamic_ncols=True, mininterval=0.5, leave=True)

    def _close(self):
        if self._bar is not None:
            self._bar.close()
            self._bar = None
