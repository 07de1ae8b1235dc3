"""The trainer's and the callbacks' attributes of earlier versions, as thin aliases of today's."""
from ..distributed import comm


def _alias(owner: str, field: str, doc: str) -> property:
    """A read-write property for ``self.<owner>.<field>``."""
    return property(lambda self: getattr(getattr(self, owner), field),
                    lambda self, value: setattr(getattr(self, owner), field, value), doc=doc)


class LegacyTrainerAttributes:
    """Names that user code and callbacks written for earlier versions read on the trainer.

    New code reads ``trainer.state`` (see :class:`basetrainer.engine.state.RunState`).
    """

    num_steps = _alias("state", "batches_per_epoch", "batches per epoch (the old name of num_batches)")
    num_batches = _alias("state", "batches_per_epoch", "batches per epoch (0 when the loader has no length)")
    num_epochs = _alias("state", "max_epochs", "epochs to train")
    epoch = _alias("state", "epoch", "the epoch being trained")
    batch = _alias("state", "batch", "the batch being trained, within its epoch")
    iteration = _alias("state", "global_step", "optimizer steps taken since training began")
    start_epoch = _alias("state", "start_epoch", "the epoch this run started at")
    start_batch = _alias("state", "start_batch", "the batch this run's first epoch started at")
    accumulating = _alias("state", "accumulating", "whether gradients wait in an accumulation window")
    loss = _alias("state", "loss", "the current batch's total loss, detached")
    loss_tally = _alias("state", "loss_tally", "the epoch's loss sums")
    skipped_steps = _alias("state", "skipped_steps", "optimizer steps dropped under ``nonfinite_loss: skip``")
    stop_training = _alias("state", "stop_requested", "set True to stop (trainer.request_stop() is the new way)")
    stop_check_every = _alias("options", "stop_check_every", "optimizer steps between checks for a stop signal")

    def check_losses_finite(self) -> None:
        """Folds the pending losses into the epoch's sums, raising on a NaN/inf one (``state.loss_tally.fold()``)."""
        self.state.loss_tally.fold()


class LegacyCallbackAttributes:
    """What callbacks written for the earlier library assign and call: ``model`` and
    ``is_main_process`` are plain assignable attributes (a value a callback assigns wins;
    unassigned, they come from the trainer and the process), ``set_model`` and ``set_trainer``
    the old setters. New callbacks read ``self.trainer.model`` and ``self.state``."""

    @property
    def model(self):
        model = self.__dict__.get("_model")
        if model is None and self.trainer is not None:
            return self.trainer.model
        return model

    @model.setter
    def model(self, model):
        self.__dict__["_model"] = model

    def set_model(self, model) -> None:
        self.model = model

    def set_trainer(self, trainer) -> None:
        self.attach(trainer)

    @property
    def is_main_process(self) -> bool:
        assigned = self.__dict__.get("_is_main_process")
        return comm.is_main_process() if assigned is None else assigned

    @is_main_process.setter
    def is_main_process(self, value):
        self.__dict__["_is_main_process"] = value
