"""A tqdm progress bar per epoch, on the main process only."""
import time

import torch
from tqdm.auto import tqdm

from ..engine import comm
from ..engine.batch import batch_size, stack_scalars
from .callbacks import LOW, Callback, batch_loss


class ProgressBar(Callback):
    """Shows the running loss (mean since the epoch began, over all ranks), the LR and samples/s.

    The loss is read every ``refresh_every`` batches, the same batches on every rank, so
    the bar costs no host sync on the other steps. The trainer adds this callback itself
    unless ``progress: false``.
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

    def on_epoch_begin(self, epoch, logs):
        trainer = self.trainer
        self._open(trainer.num_steps or None, f"Train epoch {epoch + 1}/{trainer.num_epochs}", trainer.start_batch)
        self._losses, self._loss_sum, self._count = [], None, 0
        self._samples, self._started = 0, time.perf_counter()

    def on_train_summary(self, inputs, outputs, losses, epoch, batch, logs):
        self._losses.append(batch_loss(self, losses))
        self._samples += batch_size(inputs)

    def on_batch_end(self, batch, logs):
        self._bar.update(1)
        if len(self._losses) >= self.refresh_every or batch + 1 == self.trainer.num_steps:
            self._refresh(logs)

    def _refresh(self, logs):
        window = stack_scalars(self._losses).float().sum()
        self._loss_sum = window if self._loss_sum is None else self._loss_sum + window
        self._count += len(self._losses)
        self._losses = []
        pair = comm.all_reduce_sum(torch.stack([self._loss_sum.double(),
                                                torch.tensor(float(self._count), dtype=torch.float64,
                                                             device=self._loss_sum.device)]))
        loss, count = pair.tolist()
        elapsed = max(time.perf_counter() - self._started, 1e-9)
        self._bar.set_postfix(loss=f"{loss / count:.4g}", lr=f"{logs.get('lr', 0):.3g}",
                              samples_s=f"{self._samples * comm.get_world_size() / elapsed:.0f}", refresh=False)

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
