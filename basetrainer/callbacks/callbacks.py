"""The callback base class and the list that dispatches events to callbacks."""
import logging
import weakref

from ..engine import comm
from ..engine.batch import total_loss

logger = logging.getLogger("basetrainer")

# Callbacks run in ascending priority; equal priorities keep the order of build_callbacks.
HIGHEST = 0
HIGH = 20  # recorders: they fill ``logs`` that later callbacks read
NORMAL = 50  # the default, and user callbacks
LOW = 80  # loggers: they read the finished ``logs``
LOWEST = 100  # checkpoints: they save every other callback's updated state

EVENTS = (
    "on_train_begin",
    "on_epoch_begin",
    "on_batch_begin",
    "on_train_summary",
    "on_batch_end",
    "on_test_begin",
    "on_test_summary",
    "on_test_end",
    "on_epoch_end",
    "on_train_end",
    "on_exception",
)


class Callback:
    """Observes (and may steer) a training run. Override only the events you need.

    ``EngineTrainer.run`` fires the events in this order::

        logs = {"train": {}, "test": {}, "lr": <lr of the first param group>, "epoch": 0}
        on_train_begin(logs)                     # after resume: counters, weights, RNG restored
        for epoch in range(start_epoch, num_epochs):
            logs["epoch"] = epoch
            on_epoch_begin(epoch, logs)          # sampler.set_epoch(epoch) has been called
            for batch, inputs in enumerate(train_loader):
                on_batch_begin(batch, logs)      # inputs not yet on the device
                outputs, losses = run_step(inputs)           # forward (autocast) and loss
                backward; every accumulate-th batch: clip, optimizer.step(), zero_grad()
                logs["lr"] = lr used by this step
                on_train_summary(inputs, outputs, losses, epoch, batch, logs)
                on_batch_end(batch, logs)        # LR schedulers step here
            on_test_begin(logs)                  # fired even without a test loader
            for batch, inputs in enumerate(test_loader):     # eval mode, no grad
                outputs, losses = run_step(inputs)
                on_test_summary(inputs, outputs, losses, epoch, batch, logs)
            on_test_end(logs)                    # recorders publish logs["test"][name]
            on_epoch_end(epoch, logs)            # recorders publish logs["train"][name],
                                                 # then loggers write, then checkpoints save
            if trainer.stop_training: break
        on_train_end(logs)

    If anything raises on the way (a NaN loss, ``TrainingInterrupted`` after a stop signal,
    Ctrl-C, a bug), ``on_exception(error, logs)`` fires instead of the events still to
    come, and the exception then propagates. It is the place to flush and close what a
    callback buffers or opened; it must not use collectives (other ranks may not have
    failed), and an error raised in it is logged without hiding the original one.

    ``inputs`` are the batch as the loader gave it, moved to the device; ``outputs`` and
    ``losses`` are what ``run_step`` returned (``losses``: a tensor, a list or a dict of
    tensors); ``trainer.loss`` is their sum, detached (see :func:`batch_loss`), and
    ``trainer.loss_tally`` holds the epoch's sums of those losses, kept on the device (a
    callback that needs the running training loss reads it there, not per batch). Values in
    ``logs["train"]`` and ``logs["test"]`` are plain floats averaged over the epoch and
    over all ranks. ``logs`` is created afresh for every run.

    Callbacks run on every rank, so a callback may use collectives (all ranks reach the
    same events in the same order); only the main process should write files or print.
    Within one event callbacks run by ascending ``priority``, and in list order for equal
    priorities.

    ``state_dict``/``load_state_dict`` let a stateful callback travel in the checkpoint
    and continue exactly after a resume.
    """

    priority = NORMAL

    def __init__(self):
        self._trainer_ref = None

    # The trainer holds its callbacks; a weak reference back avoids a reference cycle.
    def set_trainer(self, trainer) -> None:
        self._trainer_ref = weakref.ref(trainer) if trainer is not None else None

    @property
    def trainer(self):
        ref = getattr(self, "_trainer_ref", None)
        return ref() if ref is not None else None

    @property
    def is_main_process(self) -> bool:
        return comm.is_main_process()

    def set_model(self, model) -> None:
        """Kept for scripts written against the old API; the trainer is reachable as ``self.trainer``."""
        self.model = model

    def handles(self, event: str) -> bool:
        """Whether this callback does something at ``event``: by default, whether its class
        overrides it. A callback whose work at an event depends on its settings (say, saving
        every N iterations) answers here, and the loop then never calls it at that event.
        Asked once per run."""
        return _overrides(self, event)

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def on_train_begin(self, logs: dict):
        pass

    def on_epoch_begin(self, epoch: int, logs: dict):
        pass

    def on_batch_begin(self, batch: int, logs: dict):
        pass

    def on_train_summary(self, inputs, outputs, losses, epoch: int, batch: int, logs: dict):
        pass

    def on_batch_end(self, batch: int, logs: dict):
        pass

    def on_test_begin(self, logs: dict):
        pass

    def on_test_summary(self, inputs, outputs, losses, epoch: int, batch: int, logs: dict):
        pass

    def on_test_end(self, logs: dict):
        pass

    def on_epoch_end(self, epoch: int, logs: dict):
        pass

    def on_train_end(self, logs: dict):
        pass

    def on_exception(self, error: BaseException, logs: dict):
        pass


class CallbackList:
    """Dispatches each event to the callbacks that override it, in priority order.

    The per-event lists are computed once, so an event no callback overrides costs an
    empty loop on the hot path.
    """

    def __init__(self, callbacks, trainer=None):
        self.callbacks = sorted(callbacks, key=lambda cb: getattr(cb, "priority", NORMAL))
        for cb in self.callbacks:
            if trainer is not None and hasattr(cb, "set_trainer"):
                cb.set_trainer(trainer)
        for event in EVENTS:
            handlers = [getattr(cb, event) for cb in self.callbacks
                        if (cb.handles(event) if hasattr(cb, "handles") else _overrides(cb, event))]
            setattr(self, "_" + event, handlers)

    def handlers(self, *events):
        """The bound methods that handle each of ``events``, for a loop to call directly."""
        return tuple(getattr(self, "_" + event) for event in events)

    def on_train_begin(self, logs):
        for fn in self._on_train_begin:
            fn(logs)

    def on_epoch_begin(self, epoch, logs):
        for fn in self._on_epoch_begin:
            fn(epoch, logs)

    def on_batch_begin(self, batch, logs):
        for fn in self._on_batch_begin:
            fn(batch, logs)

    def on_train_summary(self, inputs, outputs, losses, epoch, batch, logs):
        for fn in self._on_train_summary:
            fn(inputs, outputs, losses, epoch, batch, logs)

    def on_batch_end(self, batch, logs):
        for fn in self._on_batch_end:
            fn(batch, logs)

    def on_test_begin(self, logs):
        for fn in self._on_test_begin:
            fn(logs)

    def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs):
        for fn in self._on_test_summary:
            fn(inputs, outputs, losses, epoch, batch, logs)

    def on_test_end(self, logs):
        for fn in self._on_test_end:
            fn(logs)

    def on_epoch_end(self, epoch, logs):
        for fn in self._on_epoch_end:
            fn(epoch, logs)

    def on_train_end(self, logs):
        for fn in self._on_train_end:
            fn(logs)

    def on_exception(self, error, logs):
        for fn in self._on_exception:
            try:
                fn(error, logs)
            except Exception:  # the error that stopped training is the one to report
                logger.exception("%s.on_exception failed while training stopped on %s",
                                 type(getattr(fn, "__self__", fn)).__name__, type(error).__name__)


def batch_loss(callback: Callback, losses):
    """The batch's total loss, detached: the trainer's copy when the callback is attached
    (one detach per batch for all callbacks), else computed from ``losses``."""
    trainer = callback.trainer
    if trainer is not None and trainer.loss is not None:
        return trainer.loss
    return total_loss(losses).detach()


def phase_reduction(callback: Callback, phase: str):
    """How a recorder publishes ``phase``: None when the trainer has no loader for it (nothing
    to publish), else whether its values must be summed over ranks. Every rank gets the same
    answer, so all take part in the same reductions. Without a trainer: False (one process)."""
    trainer = callback.trainer
    if trainer is None:
        return False
    if trainer.loader(phase) is None:
        return None
    return trainer.is_sharded(phase)


def _overrides(callback, event: str) -> bool:
    """True when ``callback`` does something at ``event`` (duck-typed callbacks count too)."""
    method = getattr(type(callback), event, None)
    if method is None:
        return False
    return method is not getattr(Callback, event)
