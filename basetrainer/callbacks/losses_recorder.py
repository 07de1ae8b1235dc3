"""The mean loss of each epoch, for training and evaluation."""
from ..engine.batch import batch_size
from ..metric.meters import MeanMeter
from .callbacks import HIGH, Callback, batch_loss, phase_reduction


class LossesRecorder(Callback):
    """Publishes the epoch's mean loss as ``logs["train"][indicator]`` and ``logs["test"][indicator]``.

    The mean is over samples (each batch's loss weighted by its size), and over all ranks
    when each rank sees different data, so it equals a single-process value.
    Losses stay on the device until the epoch ends: no host sync per step.
    """

    priority = HIGH

    def __init__(self, indicator: str = "loss"):
        super().__init__()
        self.indicator = indicator
        self.train_meter = MeanMeter()
        self.test_meter = MeanMeter()

    def on_train_summary(self, inputs, outputs, losses, epoch, batch, logs):
        self.train_meter.update(batch_loss(self, losses), batch_size(inputs))

    def on_test_begin(self, logs):
        self.test_meter.reset()

    def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs):
        self.test_meter.update(batch_loss(self, losses), batch_size(inputs))

    def on_test_end(self, logs):
        _publish(self, self.test_meter, "test", logs)

    def on_epoch_end(self, epoch, logs):
        _publish(self, self.train_meter, "train", logs)
        self.train_meter.reset()

    def state_dict(self):
        # Only the training meter: a checkpoint can be taken mid-epoch, never mid-evaluation.
        return {"train": self.train_meter.state_dict()}

    def load_state_dict(self, state):
        trainer = self.trainer
        self.train_meter.load_state_dict(state["train"], trainer.device if trainer is not None else None)


def _publish(recorder, meter, phase, logs):
    """Writes the meter's mean into ``logs[phase]``; every rank takes part in the reduction."""
    reduce = phase_reduction(recorder, phase)
    if reduce is None:
        return
    value = meter.compute(reduce=reduce)
    if value == value:  # not NaN: this phase saw at least one batch
        logs.setdefault(phase, {})[recorder.indicator] = value
