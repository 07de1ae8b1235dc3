"""Where a training run stands: the one object that callbacks read, and the part of a checkpoint that says where it resumes."""
from dataclasses import dataclass, field
from typing import Optional

import torch

from ..errors import CheckpointError
from ..utils.log import get_logger
from .loss_tally import LossTally

logger = get_logger()


@dataclass(eq=False)
class RunState:
    """The run's counters and running values, as ``trainer.state`` (``self.state`` in a callback).

    The trainer writes it; callbacks read it. The one field a callback changes, through
    ``trainer.request_stop()``, is ``stop_requested``.

    - ``max_epochs``: epochs the run trains for (with ``max_steps``: as many as it takes,
      the last one partial); ``max_steps``: the optimizer steps it trains for, or None
      when it trains for epochs; ``batches_per_epoch``: the training loader's length (0
      when it has none); ``accumulate_grad_batches``: batches per optimizer step (the
      config's, unless an elastic resume changed it to keep the global batch).
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
      resumes at the next epoch); ``batches_done_at``: ``time.perf_counter()`` when the
      epoch's batches were done (the last one's ``on_batch_end`` included, before the
      epoch's evaluation), stamped once per epoch; None before the first.
    - ``evaluation_abandoned``: True during the ``on_test_end`` of an evaluation that a stop
      signal cut short: its values are partial (recorders publish them into a scratch
      ``logs`` that is thrown away; nothing should log them).
    - ``evaluation_pending``: after a resume from a checkpoint that a stop signal wrote
      during an evaluation, which one the run does first: "batch" (the one before the
      last trained batch's ``on_batch_end``) or "end" (the one after the epoch's batches);
      None otherwise.

    A run of 10 epochs as it stands before training, and where a callback reads it::

        >>> from basetrainer.engine.state import RunState
        >>> state = RunState(max_epochs=10)
        >>> state.epoch, state.batch, state.global_step, state.stop_requested
        (0, 0, 0, False)

    In a callback's ``on_batch_end``: ``self.state.global_step``; after ``trainer.run()``:
    ``trainer.state.samples_seen``.
    """

    max_epochs: int
    max_steps: Optional[int] = None
    batches_per_epoch: int = 0
    accumulate_grad_batches: int = 1
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
    batches_done_at: Optional[float] = None
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

    def position(self) -> tuple:
        """Where a checkpoint taken now resumes, with the step and the evaluation owed: equal
        positions, equal checkpoints."""
        return (*self.resume_position(), self.global_step, self.evaluation_pending)

    def accumulation_window(self, batch: int) -> tuple:
        """(whether ``batch`` ends its accumulation window, that window's size).

        The last window of an epoch may be shorter, and is divided by its own size so
        that every optimizer step averages over the batches it saw.
        """
        n, per_epoch = self.accumulate_grad_batches, self.batches_per_epoch
        if n == 1:
            return True, 1
        full = (per_epoch // n) * n if per_epoch else None
        size = n if full is None or batch < full else per_epoch - full
        return (batch % n) + 1 == size, size

    # ------------------------------------------------------------------ checkpoint part
    def state_dict(self) -> dict:
        """The checkpoint's entries for the run: where it resumes, its counters, and the interrupted
        epoch's loss sums (folded first: a NaN loss raises here, before any file is replaced)."""
        epoch, batch = self.resume_position()
        return {"epoch": epoch, "batch": batch, "iteration": self.global_step, "last_eval_step": self.last_eval_step,
                "evaluation_pending": self.evaluation_pending, "samples_seen": self.samples_seen,
                "loss_tally": self.loss_tally.state_dict()}

    def load_state_dict(self, saved: dict, name: str = "the checkpoint") -> None:
        """Continues the run ``saved`` recorded: it starts at its position; the interrupted epoch's loss
        sums come back when that epoch starts again."""
        for key in ("epoch", "batch"):
            if key not in saved:
                raise CheckpointError(f"{name} is not a full training checkpoint (no '{key}'); "
                                      f"use finetune to load weights only")
        self.start_epoch, self.start_batch = int(saved["epoch"]), int(saved["batch"])
        self.global_step = int(saved.get("iteration", 0))
        self.last_eval_step = int(saved.get("last_eval_step", -1))
        self.evaluation_pending = saved.get("evaluation_pending")
        self.samples_seen = int(saved.get("samples_seen", 0))
        self.loss_tally.resume(saved.get("loss_tally"))


def log_resume(path: str, state: RunState) -> None:
    """Says where a run resumed from ``path`` goes on, or that it has nothing left to do."""
    if state.finished:
        logger.warning("%s is a finished run: all %d steps are trained, so there is nothing to do; to train "
                       "longer, raise max_iters and resume again", path, state.max_steps)
    elif state.start_epoch >= state.max_epochs and state.max_steps is None:
        logger.warning("%s is a finished run: all %d epochs are trained, so there is nothing to do; to train "
                       "longer, raise num_epochs and resume again", path, state.max_epochs)
    elif state.start_batch:
        logger.info("resumed from %s in epoch %d, after its first %d batches", path, state.start_epoch + 1,
                    state.start_batch)
    else:
        logger.info("resumed from %s at the start of epoch %d", path, state.start_epoch + 1)
