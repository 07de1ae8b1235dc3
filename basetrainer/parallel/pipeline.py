"""Pipeline parallelism: the model's layers split into stages over the mesh's ``pp`` dimension, run by a schedule of
``torch.distributed.pipelining``.

How the model is split is :mod:`.stages`'s.

**A step.** Every process of a pipeline sees the same batch. The first stage feeds the inputs, the
last computes the criterion on each microbatch, scaled by the microbatch's share of the batch and by
the accumulation window (``scale_grads=False``: exact for any split and any accumulation). The last
stage's outputs and losses are then broadcast over the pipeline, so the loss, the metrics and the
callbacks see the batch as on one process. A batch whose rows the microbatch count does not divide
(an epoch's short last batch) runs with the largest count that divides them; evaluation and
``predict`` run forward-only. Both use GPipe's order (LoopedBFS's with several stages per process),
which takes any count.
"""
import contextlib

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import (
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
    ScheduleInterleavedZeroBubble,
    ScheduleLoopedBFS,
)

from ..distributed.comm import broadcast_tensors
from ..errors import ConfigError
from ..utils.batch import batch_size, total_loss
from .plans import PipelinePlan

#: The schedule each of :data:`~basetrainer.parallel.plans.SCHEDULE_NAMES` stands for.
SCHEDULES = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B, "Interleaved1F1B": ScheduleInterleaved1F1B,
             "LoopedBFS": ScheduleLoopedBFS, "InterleavedZeroBubble": ScheduleInterleavedZeroBubble}


def microbatch_count(rows: int, configured: int) -> int:
    """The microbatches a batch of ``rows`` is split into: ``configured``, or the largest count that divides the rows
    (every microbatch of a schedule has one shape)."""
    count = min(configured, rows)
    while rows % count:
        count -= 1
    return count

class Pipeline:
    """This process's stages of a pipeline and the schedules that run them (see the module docstring).

    ``stages``: ``[(stage index, module)]``; ``group``: the pipeline's process group (one process per stage group);
    ``last``: the global rank holding the last stage."""

    def __init__(self, plan: PipelinePlan, stages: list, num_stages: int, group, last: int, device):
        self.plan, self.stages, self.num_stages = plan, stages, num_stages
        self.group, self.last, self.device = group, last, device
        self.is_first = any(index == 0 for index, _ in stages)
        self.is_last = any(index == num_stages - 1 for index, _ in stages)
        self.microbatches = plan.microbatches_for(dist.get_world_size(group))
        self.criterion, self.autocast = None, None
        self._schedules = {}
        self._losses, self._rows, self._scale = [], 1, 1
        self._schedule(True, self.microbatches)  # a count torch refuses: now

    def attach_loss(self, criterion, autocast) -> None:
        """What the last stage computes the loss with (``criterion(outputs, targets)``), under ``autocast()`` (fp16
        with its gradient scaler is refused under a pipeline: each stage's scaler would skip steps on its own)."""
        self.criterion, self.autocast = criterion, autocast

    def train_step(self, inputs, scale: int):
        """Forward and backward of one ``(data, targets)`` batch through the schedule, the loss divided by ``scale``
        (the accumulation window); returns ``(outputs, losses)`` of the whole batch on every process."""
        if not isinstance(inputs, (tuple, list)) or len(inputs) != 2:
            raise ConfigError("under a pipeline a batch is (inputs, targets): the first stage takes the inputs and "
                              "the last computes the criterion on the targets; change the loader's batches")
        data, targets = inputs
        rows = batch_size(data)
        count = self._count(rows)
        self._losses, self._rows, self._scale = [], rows, scale
        schedule = self._schedule(True, count, data)
        with self.autocast(), _stages_skipped_in_forward():
            outputs = schedule.step(*self._feed(data), target=targets if self.is_last else None)
        losses = self._batch_losses(count) if self.is_last else None
        return self._broadcast((outputs, losses))

    def forward(self, *args, **kwargs):
        """The model's outputs for a batch, forward only, on every process of the pipeline."""
        rows = batch_size(args[0] if args else next(iter(kwargs.values())))
        schedule = self._schedule(False, self._count(rows), args[0] if args else None)
        with _stages_skipped_in_forward():
            outputs = schedule.eval(*args, **kwargs) if self.is_first else schedule.eval()
        return self._broadcast(outputs)

    # ------------------------------------------------------------------ schedules
    def _count(self, rows: int) -> int:
        return microbatch_count(rows, self.microbatches)

    def _schedule(self, training: bool, count: int, example=None):
        """The schedule for ``count`` microbatches of a batch shaped like ``example`` (stages infer the shapes of
        what they pass on at their first step, so each shape has its own)."""
        shape = tuple(example.shape) if isinstance(example, torch.Tensor) else None
        key = (training, count, shape)
        if key not in self._schedules:
            if training and count == self.microbatches:
                kind = SCHEDULES[self.plan.schedule]
            else:
                kind = ScheduleGPipe if self.plan.single else ScheduleLoopedBFS
            stages = [PipelineStage(module, index, self.num_stages, self.device, group=self.group)
                      for index, module in self.stages]
            options = dict(n_microbatches=count, loss_fn=self._loss if training else None, scale_grads=False)
            try:
                self._schedules[key] = kind(stages[0], **options) if self.plan.single else kind(stages, **options)
            except ValueError as error:
                raise ConfigError(f"parallel.pipeline: schedule {self.plan.schedule} with {count} microbatches on "
                                  f"{self.num_stages} stages: {error}; change microbatches or the schedule") from None
        return self._schedules[key]

    def _feed(self, data):
        return (data,) if self.is_first else ()

    def _loss(self, outputs, targets):
        """One microbatch's loss: the criterion, weighted by the microbatch's share of the batch and divided by the
        accumulation window (its terms recorded for the batch's losses)."""
        losses = self.criterion(outputs, targets)
        share = batch_size(targets) / self._rows
        self._losses.append((share, _detached(losses)))
        return total_loss(losses) * (share / self._scale)

    def _batch_losses(self, count: int):
        """The batch's losses, as ``criterion`` gives them for one microbatch: the share-weighted sum of the last
        ``count`` (a new schedule's stages first call the loss on empty outputs, to learn the gradients' shapes)."""
        return _weighted_sum(self._losses[-count:])

    def _broadcast(self, value):
        """``value`` from the last stage's process, on every process of the pipeline."""
        return broadcast_tensors(value, self.last, self.group, self.device)

@contextlib.contextmanager
def _stages_skipped_in_forward():
    """A model whose ``forward`` calls a module of another stage (None here) fails with a ConfigError saying why."""
    try:
        yield
    except TypeError as error:
        if "'NoneType' object is not callable" not in str(error):
            raise
        raise ConfigError("the model's forward calls a module that another pipeline stage holds (None in this "
                          "process): skip such modules in forward, e.g. x = self.embed(x) if self.embed is not None "
                          "else x (see the parallelism guide), or set parallel.mesh.pp: 1") from error

def _detached(losses):
    if isinstance(losses, torch.Tensor):
        return losses.detach()
    if isinstance(losses, dict):
        return {key: value.detach() for key, value in losses.items()}
    return type(losses)(value.detach() for value in losses)


def _weighted_sum(parts):
    first = parts[0][1]
    if isinstance(first, torch.Tensor):
        return sum(share * losses for share, losses in parts)
    if isinstance(first, dict):
        return {key: sum(share * losses[key] for share, losses in parts) for key in first}
    return type(first)(sum(share * losses[index] for share, losses in parts) for index in range(len(first)))
