"""The mean loss of each epoch, for training and evaluation."""
import math

from ..engine.events import HIGH, Callback
from ..metric.meters import MeanMeter, mean_over_ranks
from ..utils.batch import batch_size
from .recording import batch_loss, phase_reduction


class LossesRecorder(Callback):
    """Publishes the epoch's mean loss as ``logs["train"][indicator]`` and ``logs["test"][indicator]``.

    The mean is over samples (each batch's loss weighted by its size), and over all ranks
    when each rank sees different data, so it equals a single-process value. The training
    mean is read at the epoch end from the trainer's ``loss_tally``, which sums the losses
    on the device as training goes (and travels in checkpoints), so this callback does
    nothing per training step; evaluation losses are summed here, also on the device.
    """

    priority = HIGH

    def __init__(self, indicator: str = "loss"):
        super().__init__()
        self.indicator = indicator
        self.test_meter = MeanMeter()

    def publishes(self):
        return (self.indicator,)

    def on_test_begin(self, logs=None):
        self.test_meter.reset()

    def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
        if losses is not None:  # None: a model with no loss in eval mode (a detector); no test loss is published
            self.test_meter.update(batch_loss(self, losses), batch_size(inputs))

    def on_test_end(self, logs=None):
        reduce = phase_reduction(self, "test")
        if reduce is not None:
            _publish(self.indicator, self.test_meter.compute(reduce=reduce), "test", logs)

    def on_epoch_end(self, epoch, logs=None):
        trainer, reduce = self.trainer, phase_reduction(self, "train")
        if trainer is not None and reduce is not None:
            _, weighted_sum, _, samples = self.state.loss_tally.totals(trainer.device)
            _publish(self.indicator, mean_over_ranks(weighted_sum, samples, reduce), "train", logs)


def _publish(indicator, value, phase, logs):
    if logs is not None and not math.isnan(value):  # NaN: this phase saw no batch
        logs.setdefault(phase, {})[indicator] = value
