"""The epoch's training losses as the trainer keeps them: checked for NaN/inf and summed on the device."""
import math

import torch

from ..distributed import comm
from ..errors import NonFiniteLossError
from ..utils.batch import stack_scalars


class LossTally:
    """The current epoch's batch losses, summed on the device, and the NaN/inf check.

    Per batch the trainer calls ``add(loss, batch_size)``: two list appends, no host
    sync. ``fold()`` runs every ``nonfinite_check_every`` batches, at the epoch end,
    before a checkpoint and whenever a reader calls ``totals()``: it stacks the pending
    losses, adds them to the epoch's float64 sums (the loss sum and the sum of loss x
    batch size) and, when ``check``, reads the new loss sum back: one host sync per
    window. A float64 sum of float32 losses cannot overflow, so it is finite exactly when
    every pending loss is; only then are the losses looked at one by one, to name the
    first bad batch. The progress bar, LossesRecorder and LogHistory read those sums, so
    no callback records the loss per step.
    """

    def __init__(self, check: bool = True):
        self.check = check
        self._resumed = None  # the sums of the epoch a resumed run goes on with
        self.start_epoch(0, 0)

    def resume(self, state) -> None:
        """Holds ``state`` (a :meth:`state_dict` of an epoch interrupted part-way) until that epoch starts again."""
        self._resumed = state

    def start_epoch(self, epoch: int, first_batch: int, device=None) -> None:
        """Empties the sums for ``epoch``, whose first batch is ``first_batch``; a resumed epoch (one that
        starts part-way) gets back the sums it had when it was interrupted, on ``device``."""
        resumed, self._resumed = self._resumed, None
        self.epoch = epoch
        self.next_batch = first_batch  # the batch index of the first pending loss
        self._losses, self._sizes = [], []
        self.sums = None  # float64 tensor [loss sum, sum of loss x batch size], on the losses' device
        self.batches = 0
        self.samples = 0
        if resumed is not None and first_batch:
            self.load_state_dict(resumed, device)

    def add(self, loss: torch.Tensor, batch_size: int) -> None:
        """Records one batch's detached loss and size; nothing is read from the device."""
        self._losses.append(loss)
        self._sizes.append(batch_size)

    @property
    def pending(self) -> int:
        """Batches added since the last fold."""
        return len(self._losses)

    def fold(self) -> None:
        """Adds the pending losses to the sums; with ``check``, raises NonFiniteLossError naming the first bad batch."""
        if not self._losses:
            return
        values = stack_scalars(self._losses).double()
        sizes = torch.tensor(self._sizes, dtype=torch.float64, device=values.device)
        sums = torch.stack([values.sum(), values.dot(sizes)])
        if self.sums is not None:
            sums = self.sums + sums
        if self.check and not math.isfinite(sums[0].item()):
            first_bad = int((~torch.isfinite(values)).nonzero()[0])
            batch = self.next_batch + first_bad
            self.discard()
            raise NonFiniteLossError(
                f"the loss is {values[first_bad].item()} at epoch {self.epoch + 1}, batch {batch + 1}: "
                f"lower the learning rate, set clip_grad_norm, check the data, or set nonfinite_loss: skip to "
                f"skip such steps")
        self.sums = sums
        self.samples += sum(self._sizes)
        self.batches += len(self._losses)
        self.next_batch += len(self._losses)
        self._losses, self._sizes = [], []

    def pending_finite(self):
        """Whether every pending loss is finite, as a 0-d bool tensor (no host sync); None when none is pending."""
        return torch.isfinite(stack_scalars(self._losses)).all() if self._losses else None

    def step_is_finite(self, grad_norm: torch.Tensor, device) -> bool:
        """Whether the gradients' norm and every pending loss are finite on every rank (each takes the same
        decision)."""
        flag = torch.isfinite(grad_norm.float())
        losses_finite = self.pending_finite()
        if losses_finite is not None:
            flag = flag & losses_finite
        bad = (~flag).to(torch.int32).reshape(1)
        return not bool(comm.all_reduce_max(bad.to(device))[0])

    def discard(self) -> None:
        """Drops the pending losses (a skipped optimizer step's batches): they count nowhere."""
        self.next_batch += len(self._losses)
        self._losses, self._sizes = [], []

    def totals(self, device=None):
        """``(loss_sum, weighted_sum, batches, samples)`` of the epoch so far, after a fold.

        The sums are 0-d float64 tensors on the losses' device (zeros before the first
        batch, on ``device``).
        """
        self.fold()
        sums = self.sums if self.sums is not None else torch.zeros(2, dtype=torch.float64, device=device)
        loss_sum, weighted_sum = sums.unbind()
        return loss_sum, weighted_sum, self.batches, self.samples

    def state_dict(self) -> dict:
        self.fold()
        loss_sum, weighted_sum = (None, None) if self.sums is None else self.sums.cpu().unbind()
        return {"loss_sum": loss_sum, "weighted_sum": weighted_sum, "batches": self.batches, "samples": self.samples}

    def load_state_dict(self, state: dict, device=None) -> None:
        """Restores the sums of an epoch interrupted part-way."""
        loss_sum, weighted_sum = state.get("loss_sum"), state.get("weighted_sum")
        self.sums = None if loss_sum is None else torch.tensor(
            [float(loss_sum), 0.0 if weighted_sum is None else float(weighted_sum)], dtype=torch.float64,
            device=device or "cpu")
        self.batches = int(state.get("batches", 0))
        self.samples = int(state.get("samples", 0))
