"""The part every search library shares: the evaluated indicator, handed over after each evaluation."""
from ..engine.events import LATE, Callback
from ..errors import ConfigError
from ..utils.published import lookup


class EvaluationReporter(Callback):
    """Calls ``report(value, step)`` after every evaluation with ``logs["test"][indicator]``.

    ``indicator`` is a name a recorder publishes (``"Acc"``, ``"loss"``), or ``"val/Acc"`` for
    one of several test sets. ``step`` is the epoch (from 1) when the run evaluates at epoch
    ends, and the global optimizer step under ``eval_every_n_iters``: epochs line up across
    trials that search the batch size, steps where evaluations fall between epoch ends.
    ``values`` keeps every ``(step, value)`` reported; ``final_value`` is the last value.

    A trial runs in one process (:func:`basetrainer.hpo.classification.trial_config` refuses
    ``distributed``): the search libraries hold a trial in the process that asked for it.
    """

    priority = LATE  # after the recorders have published logs["test"], with the other decisions

    def __init__(self, indicator: str = "Acc"):
        super().__init__()
        self.indicator = indicator
        self.values = []

    @property
    def final_value(self):
        return self.values[-1][1] if self.values else None

    def publishes(self):
        return ()  # reads the evaluation, publishes nothing in it

    def on_evaluation_end(self, logs=None):
        results = (logs or {}).get("test", {})
        value = lookup(results, self.indicator)
        if value is None:
            raise ConfigError(f"{type(self).__name__}: the evaluation gave no {self.indicator!r} (it gave "
                              f"{', '.join(results) or 'nothing'}); choose one of those as the indicator")
        state = self.state
        step = state.global_step if self.trainer.options.eval_every_n_iters else state.epoch + 1
        self.values.append((step, value))
        self.report(value, step)

    def report(self, value: float, step: int) -> None:
        """Hands ``value``, evaluated at ``step``, to the search library."""
        raise NotImplementedError
