"""Stop training when an indicator has stopped improving."""
from ..engine.events import LATE, Callback
from ..utils.log import get_logger
from ..utils.published import lookup
from .monitor import check_mode, improves

logger = get_logger()


class EarlyStopping(Callback):
    """Stops training after ``patience`` evaluations without improvement of ``indicator``.

    After every evaluation (at epoch ends, or every ``eval_every_n_iters`` steps) it reads
    ``logs["test"][indicator]`` (``"val/Acc"`` names one of several test sets); when the
    evaluation gave no such value, it reads ``logs["train"][indicator]`` at the epoch end
    instead, with one warning. A value improves when it beats the best so far by more
    than ``min_delta``: higher with ``mode="max"``, lower with ``mode="min"``; NaN never
    improves. After ``patience`` checks in a row without improvement it asks the trainer
    to stop.

    Its priority puts it after the recorders (which publish the values) and before the
    checkpoints (which save its state), so a resumed run keeps counting where it stopped.
    Every rank reads the same reduced values, so all ranks stop at the same epoch.

    The accuracies of four evaluations, the last two no better than the second, with a patience of 2::

        >>> from basetrainer.callbacks import EarlyStopping
        >>> stop = EarlyStopping("Acc", patience=2)
        >>> for epoch, accuracy in enumerate([90.0, 95.0, 94.0, 95.0]):
        ...     stop.on_evaluation_end({"test": {"Acc": accuracy}, "epoch": epoch})
        >>> stop.best, stop.stopped_epoch
        (95.0, 3)
    """

    priority = LATE

    def __init__(self, indicator: str, patience: int = 5, mode: str = "max", min_delta: float = 0.0):
        super().__init__()
        if int(patience) < 1:
            raise ValueError(f"EarlyStopping: patience must be >= 1, got {patience!r}")
        self.indicator = indicator
        self.patience = int(patience)
        self.mode = check_mode(mode, "EarlyStopping")
        self.min_delta = abs(float(min_delta))
        self.best = None
        self.wait = 0
        self.stopped_epoch = None
        self._evaluations_publish_it = False  # then it judges after each evaluation, else at epoch ends
        self._warned = False

    def publishes(self):
        return ()  # reads the evaluation, publishes nothing in it

    def on_train_begin(self, logs=None):
        # A run resumed after it had stopped early stays stopped.
        if self.trainer is not None and self.stopped_epoch is not None:
            self.trainer.request_stop()

    def on_evaluation_end(self, logs=None):
        value = lookup((logs or {}).get("test", {}), self.indicator)
        if value is not None:
            self._evaluations_publish_it = True
            self._judge(value, (logs or {}).get("epoch", 0))

    def on_epoch_end(self, epoch, logs=None):
        if self._evaluations_publish_it:
            return
        logs = logs or {}
        value = lookup(logs.get("test", {}), self.indicator)  # (a caller that fires no on_evaluation_end)
        if value is None:
            value = lookup(logs.get("train", {}), self.indicator)
            if value is None:
                self._warn(f"neither logs['test'] nor logs['train'] has {self.indicator!r}; EarlyStopping does "
                           f"nothing until a recorder publishes it")
                return
            self._warn(f"logs['test'] has no {self.indicator!r}; EarlyStopping watches the training value")
        self._judge(value, epoch)

    def _judge(self, value, epoch):
        if improves(value, self.best, self.mode, self.min_delta):
            self.best, self.wait = value, 0
            return
        self.wait += 1
        if self.wait >= self.patience:
            self.stopped_epoch = epoch
            if self.trainer is not None:
                self.trainer.request_stop()
            if self.is_main_process:
                logger.info("early stopping in epoch %d: %s has not improved on %.6g for %d checks",
                            epoch + 1, self.indicator, self.best if self.best is not None else float("nan"),
                            self.wait)

    def _warn(self, message):
        if not self._warned and self.is_main_process:
            logger.warning(message)
        self._warned = True

    def state_dict(self):
        return {"best": self.best, "wait": self.wait, "stopped_epoch": self.stopped_epoch}

    def load_state_dict(self, state):
        self.best = state["best"]
        self.wait = int(state["wait"])
        self.stopped_epoch = state["stopped_epoch"]
