"""The mean of each named loss of a dict of losses, per epoch, for training and evaluation."""
import math

from ..engine.events import HIGH, Callback
from ..metric.meters import MeanMeter
from ..utils.batch import batch_size
from .recording import phase_reduction


class MultiLossesRecorder(Callback):
    """Publishes the epoch's mean of each loss in the dict that ``run_step`` returns.

    ``indicators`` says which losses, and where they go in ``logs[phase]``:

    - a list of names, ``["cls", "box"]``: ``logs[phase]["cls"] = mean``, one entry each;
    - a dict of groups, as in the old library, ``{"loss": ["cls", "box"]}``:
      ``logs[phase]["loss"] = {"cls": mean, "box": mean, "total_loss": sum of the means}``
      (the total only when a group has several names);
    - None: one group ``"loss"`` with every name of the first batch's dict.

    Means are over samples (each batch's loss weighted by its size), and over all ranks
    when each rank sees different data, as in LossesRecorder. Train
    values are published at ``on_epoch_end``, test values at ``on_test_end``; losses stay
    on the device until then.
    """

    priority = HIGH

    def __init__(self, indicators=None):
        super().__init__()
        if isinstance(indicators, str):
            indicators = [indicators]
        self.indicators = indicators
        self.train_meters = {}
        self.test_meters = {}
        if indicators is not None:
            self._create_meters()

    def publishes(self):
        """The names it publishes (``"cls"``, or a group's ``"loss/cls"`` and ``"loss/total_loss"``); None
        without ``indicators``, whose names come from the first batch's dict."""
        if self.indicators is None:
            return None
        if not isinstance(self.indicators, dict):
            return tuple(self.indicators)
        return tuple(f"{group}/{name}" for group, names in self.indicators.items()
                     for name in [*names, *([f"total_{group}"] if len(names) > 1 else [])])

    def on_train_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
        self._record("train", inputs, losses)

    def on_test_begin(self, logs=None):
        for meter in self.test_meters.values():
            meter.reset()

    def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
        if losses is not None:  # None: a model with no loss in eval mode (a detector); no test losses are published
            self._record("test", inputs, losses)

    def on_test_end(self, logs=None):
        self._publish(self.test_meters, "test", logs)

    def on_epoch_end(self, epoch, logs=None):
        self._publish(self.train_meters, "train", logs)
        for meter in self.train_meters.values():
            meter.reset()

    def state_dict(self):
        # Only the training meters: a checkpoint can be taken mid-epoch, never mid-evaluation.
        return {"train": {name: meter.state_dict() for name, meter in self.train_meters.items()},
                "indicators": self.indicators}

    def load_state_dict(self, state):
        if self.indicators is None and state.get("indicators") is not None:
            self.indicators = state["indicators"]
            self._create_meters()
        trainer = self.trainer
        device = trainer.device if trainer is not None else None
        for name, meter_state in state["train"].items():
            if name in self.train_meters:
                self.train_meters[name].load_state_dict(meter_state, device)

    # ------------------------------------------------------------------ helpers
    def _names(self):
        if isinstance(self.indicators, dict):
            return [name for names in self.indicators.values() for name in names]
        return list(self.indicators)

    def _record(self, phase, inputs, losses):
        if self.indicators is None:
            self._learn_names(losses)
        _update(self.train_meters if phase == "train" else self.test_meters, losses, batch_size(inputs))

    def _learn_names(self, losses):
        """Without ``indicators``: one group "loss" with every name of the first dict of losses."""
        _require_dict(losses)
        self.indicators = {"loss": list(losses)}
        self._create_meters()

    def _create_meters(self):
        # Every rank holds a meter for every name, so that all take part in the same reductions.
        self.train_meters = {name: MeanMeter() for name in self._names()}
        self.test_meters = {name: MeanMeter() for name in self._names()}

    def _publish(self, meters, phase, logs):
        """Writes the means into ``logs[phase]``; every rank takes part in the reductions."""
        reduce = phase_reduction(self, phase)
        if self.indicators is None or reduce is None:
            return
        means = {name: meters[name].compute(reduce=reduce) for name in self._names()}
        if logs is None or all(math.isnan(value) for value in means.values()):  # all NaN: this phase saw no batch
            return
        values = logs.setdefault(phase, {})
        if isinstance(self.indicators, dict):
            for group, names in self.indicators.items():
                entry = {name: means[name] for name in names}
                if len(names) > 1:
                    entry[f"total_{group}"] = sum(entry.values())
                values[group] = entry
        else:
            values.update(means)


def _update(meters, losses, weight):
    _require_dict(losses)
    for name, meter in meters.items():
        if name not in losses:
            raise ValueError(f"MultiLossesRecorder: run_step's losses have no {name!r} (they have "
                           f"{', '.join(map(repr, losses))}); fix the indicators or the losses dict")
        meter.update(losses[name], weight)


def _require_dict(losses):
    if not isinstance(losses, dict):
        raise TypeError(f"MultiLossesRecorder needs run_step to return a dict of named losses, got "
                        f"{type(losses).__name__}; use LossesRecorder for a single loss")
