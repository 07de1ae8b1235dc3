"""A tqdm progress bar per epoch, on the main process only."""
import math
import time

from tqdm.auto import tqdm

from ..engine import comm
from .callbacks import LOW, Callback


class ProgressBar(Callback):
    """Shows the running loss (mean since the epoch began, over all ranks), the LR and samples/s.

    The loss and the sample count come from the trainer's ``loss_tally``, read every
    ``refresh_every`` batches: the same batches on every rank, which join one all-reduce
    there, so the bar costs no host sync on other steps. tqdm itself is advanced only as
    often as it could redraw: every ``mininterval`` seconds at the epoch's pace so far
    (or tqdm's own ``miniters``, if larger), so most batches cost one comparison. The
    trainer adds this callback itself unless ``progress: false``.
    """

    priority = LOW
    mininterval = 0.5  # seconds between redraws of the bar

    def __init__(self, refresh_every: int = 50):
        super().__init__()
        self.refresh_every = refresh_every
        self._bar = None

    def _open(self, total, desc, initial=0):
        self._close()
        self._bar = tqdm(total=total, initial=initial, desc=desc, disable=not comm.is_main_process(),
                         dynamic_ncols=True, mininterval=self.mininterval, leave=True)

    def _close(self):
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def on_train_begin(self, logs):
        self.trainer.loss_tally.count_samples = True

    def on_epoch_begin(self, epoch, logs):
        trainer = self.trainer
        start = trainer.start_batch
        self._open(trainer.num_steps or None, f"Train epoch {epoch + 1}/{trainer.num_epochs}", start)
        self._samples_before, self._started = trainer.loss_tally.samples, time.perf_counter()
        self._first = start
        self._next_refresh = start + self.refresh_every
        self._next_draw = math.inf if self._bar.disable else start + 1
        self._last = trainer.num_steps or math.inf
        self._next = min(self._next_refresh, self._next_draw, self._last)

    def on_batch_end(self, batch, logs):
        if batch + 1 >= self._next:
            self._advance(batch + 1, logs)

    def _advance(self, done, logs):
        """Refreshes the loss (on every rank) and redraws the bar (main process) when each is due."""
        last = done >= self._last
        if done >= self._next_refresh or last:
            self._refresh(logs)
            self._next_refresh = done + self.refresh_every
        bar = self._bar
        if done >= self._next_draw or (last and not bar.disable):
            bar.update(done - bar.n)
            self._next_draw = done + self._batches_per_redraw(done)
        self._next = min(self._next_refresh, self._next_draw, self._last)

    def _batches_per_redraw(self, done) -> int:
        """The batches tqdm needs before it may redraw: ``mininterval`` at this epoch's pace, or its
        own ``miniters`` (which it learns only after redrawing, so not in epochs shorter than that).
        Half the interval, so that a redraw is never put off by one more interval."""
        elapsed = time.perf_counter() - self._started
        at_pace = int(self.mininterval / 2 * (done - self._first) / elapsed) if elapsed > 0 else 0
        return max(1, at_pace, int(self._bar.miniters))

    def _refresh(self, logs):
        trainer = self.trainer
        loss_sum, _, batches, samples = trainer.loss_tally.totals(trainer.device)
        loss, count = comm.sum_over_ranks(loss_sum, batches)
        elapsed = max(time.perf_counter() - self._started, 1e-9)
        speed = (samples - self._samples_before) * comm.get_world_size() / elapsed
        postfix = {"loss": f"{loss / count:.4g}"} if count else {}
        self._bar.set_postfix(**postfix, lr=f"{logs.get('lr', 0):.3g}", samples_s=f"{speed:.0f}", refresh=False)

    def on_test_begin(self, logs):
        self._close()
        loader = self.trainer.test_loader
        if loader is not None:
            self._open(len(loader) if hasattr(loader, "__len__") else None, "Test ")

    def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs):
        self._bar.update(1)

    def on_test_end(self, logs):
        self._close()

    def on_train_end(self, logs):
        self._close()

    def on_exception(self, error, logs):
        self._close()  # the error's message then starts on a line of its own
