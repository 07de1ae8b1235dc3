"""The event protocol: the ``Callback`` base class, its events and priorities, and the list that fires them.

The engine owns this protocol; callbacks, recorders and loggers sit above it and import it.
"""
import difflib
import weakref
from enum import Enum

from ..utils.log import get_logger
from .legacy import LegacyCallbackAttributes

# Callbacks run in ascending priority; equal priorities keep the order of build_callbacks.
HIGHEST = 0  # LR schedules and EMA: they act before anyone reads the step's results
HIGH = 20  # recorders: they fill ``logs`` that later callbacks read
NORMAL = 50  # the default, and user callbacks
LATE = 70  # decisions on the finished ``logs`` (early stopping), before they are written
LOW = 80  # loggers: they read the finished ``logs``
LOWEST = 100  # checkpoints: they save every other callback's updated state



class Event(str, Enum):
    """The events a callback may handle, in the order a run fires them (see :class:`Callback`).

    Each value is the name of the callback method that handles it; the members compare equal
    to those strings, and a name that is no event is an error where it is used.
    """

    TRAIN_BEGIN = "on_train_begin"
    EPOCH_BEGIN = "on_epoch_begin"
    BATCH_BEGIN = "on_batch_begin"
    TRAIN_SUMMARY = "on_train_summary"
    BATCH_END = "on_batch_end"
    TEST_BEGIN = "on_test_begin"
    TEST_SUMMARY = "on_test_summary"
    TEST_END = "on_test_end"
    EVALUATION_END = "on_evaluation_end"
    EPOCH_END = "on_epoch_end"
    TRAIN_END = "on_train_end"
    EXCEPTION = "on_exception"

    def __str__(self):
        return self.value


EVENTS = tuple(event.value for event in Event)


class Callback(LegacyCallbackAttributes):
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
    returned (``losses``: a tensor, a list or a dict of tensors; in evaluation None from a model that
    computes no loss in eval mode, as torchvision's detectors, whose ``outputs`` are then their predictions;
    in training such a model's ``outputs`` may be None). ``logs["train"]`` and
    ``logs["test"]`` hold plain floats averaged over the epoch and over all ranks;
    ``logs["lr"]`` the lr the last step used. ``logs`` is created afresh for every run.

    **What a callback may change.** Its own attributes; ``logs`` (recorders publish
    there); the optimizer's lr (schedulers); the model's weights between steps (EMA swaps
    in its average for evaluation and puts the training weights back). Anything else it
    asks the trainer for, through these requests only:

    - ``trainer.request_stop()``: training ends after the current batch (that epoch's
      evaluation and ``on_epoch_end`` still run);
    - ``trainer.save_checkpoint(path)``: writes the full training state (every rank
      calls it; the main process writes);
    - ``trainer.set_checkpoint_path(path)``: where a stop signal saves, and where
      ``resume: auto`` looks first;
    - ``trainer.export_weights()``: the weights to ship (CPU, no wrapper prefixes);
      ``trainer.set_export_weights(provider)`` makes ``provider()`` their source (EMA).

    Callbacks run on every rank, so a callback may use collectives (all ranks reach the
    same events in the same order); only the main process should write files or print.
    Within one event callbacks run by ascending ``priority``, and in list order for equal
    priorities; ``priorities`` gives one event a priority of its own (a logger that writes at
    ``LOW`` but closes after the checkpoints: ``{Event.TRAIN_END: LOWEST + 10}``).
    ``state_dict``/``load_state_dict`` let a stateful callback travel in the checkpoint and
    continue exactly after a resume, under ``state_key`` (by default its class's qualified
    name; the trainer numbers the second of a kind).

    Callbacks written for the earlier library keep working: every event takes ``logs``
    as optional, and ``trainer``, ``model`` and ``is_main_process`` are plain assignable
    attributes (a value a callback assigns wins; unassigned, they come from the trainer;
    see :class:`~basetrainer.engine.legacy.LegacyCallbackAttributes`).

    A callback that ends training once the training loss is below ``threshold``, fired here by hand as the
    trainer fires it at the end of an epoch::

        >>> from basetrainer import Callback, Event
        >>> from basetrainer.engine.events import CallbackList
        >>> class StopBelow(Callback):
        ...     def __init__(self, threshold):
        ...         self.threshold = threshold
        ...     def on_epoch_end(self, epoch, logs=None):
        ...         if logs["train"]["loss"] < self.threshold:
        ...             self.trainer.request_stop()
        >>> class Trainer:  # the one request this callback makes
        ...     stopped = False
        ...     def request_stop(self):
        ...         self.stopped = True
        >>> trainer = Trainer()
        >>> callbacks = CallbackList([StopBelow(0.5)], trainer=trainer)
        >>> callbacks.fire(Event.EPOCH_END, 0, {"train": {"loss": 0.3}})
        >>> trainer.stopped
        True
    """

    priority = NORMAL
    priorities = {}  # event -> priority, for the events that differ from ``priority``; never mutated
    state_key = None  # the name its state is saved under in a checkpoint (None: the qualified class name)

    def attach(self, trainer) -> None:
        """Called by the trainer before the run: the callback reaches it as ``self.trainer``.

        Held through a weak reference (the trainer holds its callbacks), unless the
        callback assigned ``self.trainer`` itself.
        """
        if self.__dict__.get("_trainer") is None or isinstance(self.__dict__["_trainer"], weakref.ref):
            self.__dict__["_trainer"] = weakref.ref(trainer) if trainer is not None else None

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

    def handles(self, event: str) -> bool:
        """Whether this callback does something at ``event``: by default, whether its class
        overrides it. A callback whose work at an event depends on its settings (say, saving
        every N iterations) answers here, and the loop then never calls it at that event.
        Asked once per run."""
        return _overrides(self, event)

    def publishes(self):
        """The names this callback publishes into ``logs["test"]``, as they are read there (``"loss"``, a
        group's member ``"loss/cls"``), or None when it does not say. A ``target`` (config key) is checked
        against them before training; where a callback that handles ``on_test_end`` or ``on_evaluation_end``
        says nothing, that check waits for the first evaluation. One that publishes nothing returns ``()``."""
        return None

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
        for cb in self.callbacks:
            _warn_of_misnamed_events(cb)
            attach = getattr(cb, "attach", None) or getattr(cb, "set_trainer", None)
            if trainer is not None and attach is not None:
                attach(trainer)
        self._handlers = {event.value: [getattr(cb, event.value) for cb in sorted(self.callbacks,
                                                                                  key=lambda cb: _priority(cb, event))
                                        if _handles(cb, event.value)]
                          for event in Event}

    def fire(self, event, *args) -> None:
        """Calls every handler of ``event`` (an :class:`Event`, or its name) with ``args``."""
        try:  # the look-up written out here, not a call of _handlers_of: this runs three times a batch
            handlers = self._handlers[event]
        except KeyError:
            raise ValueError(f"{event!r} is no event; the events are {', '.join(EVENTS)}") from None
        for handler in handlers:
            handler(*args)

    def handlers(self, event) -> list:
        """The bound methods that handle ``event``, in the order they are called."""
        return list(self._handlers_of(event))

    def _handlers_of(self, event):
        try:
            return self._handlers[event]
        except KeyError:
            raise ValueError(f"{event!r} is no event; the events are {', '.join(EVENTS)}") from None

    def fire_exception(self, error: BaseException, logs: dict) -> None:
        """``on_exception`` for every callback that handles it; their own errors are logged, not raised."""
        for handler in self._handlers[Event.EXCEPTION.value]:
            try:
                handler(error, logs)
            except Exception:  # the error that stopped training is the one to report
                get_logger().exception("%s.on_exception failed while training stopped on %s",
                                       type(getattr(handler, "__self__", handler)).__name__, type(error).__name__)


def _warn_of_misnamed_events(callback) -> None:
    """A method named like an event that is none (``on_epoch_ends``) would never be called: say so."""
    for name in dir(type(callback)):
        if name.startswith("on_") and name not in EVENTS and callable(getattr(type(callback), name)):
            close = difflib.get_close_matches(name, EVENTS, n=1)
            get_logger().warning("%s.%s is no event, so the loop never calls it%s", type(callback).__name__, name,
                                 f"; did you mean {close[0]}?" if close else f" (the events: {', '.join(EVENTS)})")


def _priority(callback, event: Event) -> int:
    """The priority ``callback`` runs at for ``event``: its ``priorities`` entry, else its ``priority``."""
    priorities = getattr(callback, "priorities", None) or {}
    return priorities.get(event, getattr(callback, "priority", NORMAL))


def _handles(callback, event: str) -> bool:
    handles = getattr(callback, "handles", None)
    return handles(event) if handles is not None else _overrides(callback, event)


def _overrides(callback, event: str) -> bool:
    """True when ``callback`` does something at ``event`` (duck-typed callbacks count too)."""
    method = getattr(type(callback), event, None)
    if method is None:
        return False
    return method is not getattr(Callback, event)
