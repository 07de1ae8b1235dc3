"""The epoch's training losses as the trainer keeps them: checked for NaN/inf and summed on the device."""
import torch

from ..errors import NonFiniteLossError
from .batch import stack_scalars


class LossTally:
    """The current epoch's batch losses, summed on the device, and the NaN/inf check.

    Per batch the trainer appends the detached loss to ``window`` and, once a reader has
    set ``count_samples``, the batch size to ``sizes``: list appends, no host sync.
    ``fold()`` runs every ``nonfinite_check_every`` batches, at the epoch end, before a
    checkpoint and whenever a reader calls ``totals()``: it stacks the window in one op,
    checks it (one host sync per window; the error names the first bad batch) and adds it
    to the epoch's sums. The progress bar, LossesRecorder and LogHistory read those sums,
    so no callback records the loss per step.
    """

    def __init__(self, check: bool = True):
        self.check = check
        self.count_samples = False
        self.window, self.sizes = [], []  # cleared in place: the trainer holds them between steps
        self.start_epoch(0, 0)

    def start_epoch(self, epoch: int, first_batch: int) -> None:
        """Empties the sums for ``epoch``, whose first batch is ``first_batch``."""
        self.window.clear()
        self.sizes.clear()
        self.epoch = epoch
        self.next_batch = first_batch  # the batch index of window[0]
        self.loss_sum = None  # float64 tensor: the sum of the batch losses
        self.weighted_sum = None  # float64 tensor: the sum of loss x batch size (with count_samples)
        self.batches = 0
        self.samples = 0

    def fold(self) -> None:
        """Checks the pending losses and adds them to the sums; raises NonFiniteLossError naming the first bad batch."""
        window = self.window
        if not window:
            return
        values = stack_scalars(window)
        if self.check:
            finite = torch.isfinite(values)
            if not bool(finite.all()):
                first_bad = int((~finite).nonzero()[0])
                batch = self.next_batch + first_bad
                self.discard()
                raise NonFiniteLossError(
                    f"the loss is {values[first_bad].item()} at epoch {self.epoch}, batch {batch}: "
                    f"lower the learning rate, set clip_grad_norm, check the data, or set nonfinite_loss: skip to "
                    f"skip such steps")
        values = values.double()
        total = values.sum()
        self.loss_sum = total if self.loss_sum is None else self.loss_sum + total
        if self.sizes:
            weights = torch.tensor(self.sizes, dtype=torch.float64, device=values.device)
            weighted = (values * weights).sum()
            self.weighted_sum = weighted if self.weighted_sum is None else self.weighted_sum + weighted
            self.samples += sum(self.sizes)
        self.batches += len(window)
        self.next_batch += len(window)
        window.clear()
        self.sizes.clear()

    def pending_finite(self):
        """Whether every pending loss is finite, as a 0-d bool tensor (no host sync); None when none is pending."""
        return torch.isfinite(stack_scalars(self.window)).all() if self.window else None

    def discard(self) -> None:
        """Drops the pending losses (a skipped optimizer step's batches): they count nowhere."""
        self.next_batch += len(self.window)
        self.window.clear()
        self.sizes.clear()

    def totals(self, device=None):
        """``(loss_sum, weighted_sum, batches, samples)`` of the epoch so far, after a fold.

        The sums are float64 tensors on the losses' device (zeros before the first batch,
        on ``device``); ``weighted_sum`` and ``samples`` count only once ``count_samples``
        was set.
        """
        self.fold()
        zero = None
        if self.loss_sum is None or self.weighted_sum is None:
            zero = torch.zeros((), dtype=torch.float64, device=device)
        return (zero if self.loss_sum is None else self.loss_sum,
                zero if self.weighted_sum is None else self.weighted_sum, self.batches, self.samples)

    def state_dict(self) -> dict:
        self.fold()
        return {"loss_sum": None if self.loss_sum is None else self.loss_sum.cpu(),
                "weighted_sum": None if self.weighted_sum is None else self.weighted_sum.cpu(),
                "batches": self.batches, "samples": self.samples}

    def load_state_dict(self, state: dict, device=None) -> None:
        """Restores the sums of an epoch interrupted part-way (after ``start_epoch``)."""
        for key in ("loss_sum", "weighted_sum"):
            value = state.get(key)
            setattr(self, key, None if value is None else value.to(device or "cpu"))
        self.batches = int(state.get("batches", 0))
        self.samples = int(state.get("samples", 0))
