"""The event protocol: the ``Callback`` base class, its events and priorities, and the list that fires them.

The engine owns this protocol; callbacks, recorders and loggers sit above it and import it.
"""
import weakref

from ..utils.log import get_logger
from ..distributed import comm
from ..utils.batch import total_loss

# Callbacks run in ascending priority; equal priorities keep the order of build_callbacks.
HIGHEST = 0  # LR schedules and EMA: they act before anyone reads the step's results
HIGH = 20  # recorders: they fill ``logs`` that later callbacks read
NORMAL = 50  # the default, and user callbacks
LATE = 70  # decisions on the finished ``logs`` (early stopping), before they are written
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
    "on_evaluation_end",
    "on_epoch_end",
    "on_train_end",
    "on_exception",
)


class Callback:
    """Observes (and may steer) a training run. Override only the events you need.

    ``EngineTrainer.run`` fires the events in this order::

        logs = {"train": {}, "test": {}, "lr": <lr of the first param group>, "epoch": 0}
        on_train_begin(logs)                     # after resume: counters, weights, RNG restored
        for epoch in range(start_epoch, max_epochs):     # with max_iters: until that many steps
            on_epoch_begin(epoch, logs)          # the sampler's set_epoch(epoch) comes next
            for batch, inputs in enumerate(train_loader):
                on_batch_begin(batch, logs)      # inputs not yet on the device
                outputs, losses = run_step(inputs)           # forward (autocast) and loss
                backward; every accumulate-th batch: clip, optimizer.step(), zero_grad()
                on_train_summary(inputs, outputs, losses, epoch, batch, logs)
                [evaluate, when eval_every_n_iters steps have passed]
                on_batch_end(batch, logs)        # LR schedulers step here
            [evaluate, at the epoch end (unless eval_every_n_iters), or after the last steps]
            on_epoch_end(epoch, logs)            # recorders publish logs["train"][name],
                                                 # then loggers write, then checkpoints save
            if state.stop_requested: break
        on_train_end(logs)

    where one evaluation is::

        for each test set (the loader, or each of a dict of loaders; state.eval_set names it):
            on_test_begin(logs)                  # fired even without a test loader
            for batch, inputs in enumerate(loader):          # eval mode, no grad
                outputs, losses = run_step(inputs)
                on_test_summary(inputs, outputs, losses, epoch, batch, logs)
            on_test_end(logs)                    # recorders publish logs["test"][name]
        on_evaluation_end(logs)                  # logs["test"] complete (by set name when several):
                                                 # best models and early stopping decide here

    If anything raises on the way (a NaN loss, ``TrainingInterrupted`` after a stop signal,
    Ctrl-C, a bug), ``on_exception(error, logs)`` fires instead of the events still to
    come, and the exception then propagates. It is the place to flush and close what a
    callback buffers or opened; it must not use collectives (other ranks may not have
    failed), and an error raised in it is logged without hiding the original one.

    **What a callback reads.** ``self.state`` (the trainer's :class:`RunState`): epoch,
    batch, global step, max epochs, batches per epoch, where the run started, whether
    gradients are accumulating, the batch's detached total loss, the epoch's loss tally
    (loss sums kept on the device: a callback that needs the running training loss reads
    them there, not per batch), samples seen, the last lr, ``logs`` and the stop flag.
    ``self.trainer`` gives the model, optimizer, loaders, device and rank. ``inputs`` are
    the batch moved to the device; ``outputs`` and ``losses`` are what ``run_step``
    returned (``losses``: a tensor, a list or a dict of tensors). ``logs["train"]`` and
    ``logs["test"]`` hold plain floats averaged over the epoch and over all ranks;
    ``logs["lr"]`` the lr the last step used. ``logs`` is created afresh for every run.

    **What a callback may change.** Its own attributes; ``logs`` (recorders publish
    there); the optimizer's lr (schedulers); the model's weights between steps (EMA swaps
    in its average for evaluation and puts the training weights back). Anything else it
    asks the trainer for, through these requests only:

    - ``trainer.request_stop()``: training ends after this epoch;
    - ``trainer.save_checkpoint(path)``: writes the full training state (every rank
      calls it; the main process writes);
    - ``trainer.set_checkpoint_path(path)``: where a stop signal saves, and where
      ``resume: auto`` looks first;
    - ``trainer.export_weights()``: the weights to ship (CPU, no wrapper prefixes);
      ``trainer.set_export_weights(provider)`` makes ``provider()`` their source (EMA).

    Callbacks run on every rank, so a callback may use collectives (all ranks reach the
    same events in the same order); only the main process should write files or print.
    Within one event callbacks run by ascending ``priority``, and in list order for equal
    priorities. ``state_dict``/``load_state_dict`` let a stateful callback travel in the
    checkpoint and continue exactly after a resume.

    Callbacks written for the earlier library keep working: every event takes ``logs``
    as optional, and ``trainer``, ``model`` and ``is_main_process`` are plain assignable
    attributes (a value a callback assigns wins; unassigned, they come from the trainer).
    """

    priority = NORMAL

    def attach(self, trainer) -> None:
        """Called by the trainer before the run: the callback reaches it as ``self.trainer``.

        Held through a weak reference (the trainer holds its callbacks), unless the
        callback assigned ``self.trainer`` itself.
        """
        if self.__dict__.get("_trainer") is None or isinstance(self.__dict__["_trainer"], weakref.ref):
            self.__dict__["_trainer"] = weakref.ref(trainer) if trainer is not None else None

    set_trainer = attach  # the name of earlier versions

    @property
    def trainer(self):
        trainer = self.__dict__.get("_trainer")
        return trainer() if isinstance(trainer, weakref.ref) else trainer

    @trainer.setter
    def trainer(self, trainer):
        self.__dict__["_trainer"] = trainer

    @property
    def state(self):
        """The run's :class:`~basetrainer.engine.state.RunState` (None before the callback is attached)."""
        trainer = self.trainer
        return trainer.state if trainer is not None else None

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
        """Kept for scripts written against the earlier library."""
        self.model = model

    @property
    def is_main_process(self) -> bool:
        assigned = self.__dict__.get("_is_main_process")
        return comm.is_main_process() if assigned is None else assigned

    @is_main_process.setter
    def is_main_process(self, value):
        self.__dict__["_is_main_process"] = value

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

    def on_train_begin(self, logs=None):
        pass

    def on_epoch_begin(self, epoch, logs=None):
        pass

    def on_batch_begin(self, batch, logs=None):
        pass

    def on_train_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
        pass

    def on_batch_end(self, batch, logs=None):
        pass

    def on_test_begin(self, logs=None):
        pass

    def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
        pass

    def on_test_end(self, logs=None):
        pass

    def on_evaluation_end(self, logs=None):
        pass

    def on_epoch_end(self, epoch, logs=None):
        pass

    def on_train_end(self, logs=None):
        pass

    def on_exception(self, error, logs=None):
        pass


class CallbackList:
    """Fires each event at the callbacks that handle it, in priority order: the one dispatch path.

    Which callbacks handle which event is worked out once, when the list is made, so an
    event no callback handles costs one empty loop, cheap enough for every batch.
    """

    def __init__(self, callbacks, trainer=None):
        self.callbacks = sorted(callbacks, key=lambda cb: getattr(cb, "priority", NORMAL))
        if trainer is not None:
            for cb in self.callbacks:
                attach = getattr(cb, "attach", None) or getattr(cb, "set_trainer", None)
                if attach is not None:
                    attach(trainer)
        self._handlers = {event: [getattr(cb, event) for cb in self.callbacks if _handles(cb, event)]
                          for event in EVENTS}

    def fire(self, event: str, *args) -> None:
        """Calls every handler of ``event`` with ``args``."""
        for handler in self._handlers[event]:
            handler(*args)

    def handlers(self, event: str) -> list:
        """The bound methods that handle ``event``, in the order they are called."""
        return list(self._handlers[event])

    def fire_exception(self, error: BaseException, logs: dict) -> None:
        """``on_exception`` for every callback that handles it; their own errors are logged, not raised."""
        for handler in self._handlers["on_exception"]:
            try:
                handler(error, logs)
            except Exception:  # the error that stopped training is the one to report
                get_logger().exception("%s.on_exception failed while training stopped on %s",
                                       type(getattr(handler, "__self__", handler)).__name__, type(error).__name__)


def batch_loss(callback: Callback, losses):
    """The batch's total loss, detached: the run state's copy when the callback is attached
    (one detach per batch for all callbacks), else computed from ``losses``."""
    state = callback.state
    if state is not None and state.loss is not None:
        return state.loss
    return total_loss(losses).detach()


def phase_reduction(callback: Callback, phase: str):
    """How a recorder publishes ``phase`` ("train"/"test"): None when the trainer has no loader
    for it (nothing to publish), else whether its values must be summed over ranks. Every rank
    gets the same answer, so all take part in the same reductions. Without a trainer: False."""
    trainer = callback.trainer
    if trainer is None:
        return False
    if trainer.loader(phase) is None:
        return None
    return trainer.is_sharded(phase)


def _handles(callback, event: str) -> bool:
    handles = getattr(callback, "handles", None)
    return handles(event) if handles is not None else _overrides(callback, event)


def _overrides(callback, event: str) -> bool:
    """True when ``callback`` does something at ``event`` (duck-typed callbacks count too)."""
    method = getattr(type(callback), event, None)
    if method is None:
        return False
    return method is not getattr(Callback, event)
