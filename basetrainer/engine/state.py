"""Where a training run stands: the one object that callbacks read."""
from dataclasses import dataclass, field
from typing import Optional

import torch

from .loss_tally import LossTally


@dataclass(eq=False)
class RunState:
    """The run's counters and running values, as ``trainer.state`` (``self.state`` in a callback).

    The trainer writes it; callbacks read it. The one field a callback changes, through
    ``trainer.request_stop()``, is ``stop_requested``.

    - ``max_epochs``: epochs the run trains for (with ``max_steps``: as many as it takes,
      the last one partial); ``max_steps``: the optimizer steps it trains for, or None
      when it trains for epochs; ``batches_per_epoch``: the training loader's length (0
      when it has none).
    - ``epoch``, ``batch``: the epoch and the batch within it being trained (both from 0);
      ``global_step``: optimizer steps taken since training began (a batch whose
      gradients wait in an accumulation window is no step; ``accumulating`` is True then).
    - ``start_epoch``, ``start_batch``: where this run started (after a resume: where the
      interrupted run stopped); ``start_batch`` is 0 again once that epoch is done.
    - ``loss``: the current batch's total loss, detached; ``loss_tally``: the epoch's
      sums of those losses on the device, with the NaN/inf check (see :class:`LossTally`).
    - ``samples_seen``: training samples this process has trained on since the run began
      (carried over a resume); ``skipped_steps``: optimizer steps dropped by
      ``nonfinite_loss: skip``.
    - ``lr``: the lr of the first param group in the last step; ``logs``: the dict the
      events receive.
    - ``eval_set``: the name of the test set being evaluated (None outside evaluation and
      when there is one test loader); ``last_eval_step``: the global step of the last
      evaluation (-1: none yet).
    - ``epoch_finished``: whether ``epoch``'s end events have run (a checkpoint then
      resumes at the next epoch).
    - ``evaluation_abandoned``: True during the ``on_test_end`` of an evaluation that a stop
      signal cut short: its values are partial (recorders publish them into a scratch
      ``logs`` that is thrown away; nothing should log them).
    - ``evaluation_pending``: after a resume from a checkpoint that a stop signal wrote
      during an evaluation, which one the run does first: "batch" (the one before the
      last trained batch's ``on_batch_end``) or "end" (the one after the epoch's batches);
      None otherwise.
    """

    max_epochs: int
    max_steps: Optional[int] = None
    batches_per_epoch: int = 0
    epoch: int = 0
    batch: int = 0
    global_step: int = 0
    start_epoch: int = 0
    start_batch: int = 0
    accumulating: bool = False
    loss: Optional[torch.Tensor] = None
    loss_tally: LossTally = field(default_factory=LossTally)
    samples_seen: int = 0
    skipped_steps: int = 0
    lr: float = 0.0
    logs: dict = field(default_factory=dict)
    stop_requested: bool = False
    eval_set: Optional[str] = None
    last_eval_step: int = -1
    epoch_finished: bool = False
    evaluation_abandoned: bool = False
    evaluation_pending: Optional[str] = None

    @property
    def finished(self) -> bool:
        """Whether the run has taken all its ``max_steps`` optimizer steps."""
        return self.max_steps is not None and self.global_step >= self.max_steps

    def resume_position(self):
        """``(epoch, batch)`` of the next batch to train: what a checkpoint taken now resumes at."""
        if self.epoch_finished:
            return self.epoch + 1, 0
        return self.epoch, self.batch + 1
