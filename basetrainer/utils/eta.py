"""How long a run has left: its training batches still to come at the current pace, and its evaluations."""
import datetime
import time


def seconds_left(state, batch, seconds_per_batch, eval_every=0, seconds_per_evaluation=0.0):
    """Seconds until the run ends once ``batch`` (of the current epoch) is done: the batches left at
    ``seconds_per_batch`` and the evaluations still to come (every ``eval_every`` optimizer steps, else one
    per epoch) at ``seconds_per_evaluation``. None when the loader has no length, so the epoch's does not
    say. ``state``: the run state, whose counters (epoch, global step and their limits) are read."""
    steps, per_step = state.batches_per_epoch, state.accumulate_grad_batches
    if state.max_steps is not None:
        batches_left = (state.max_steps - state.global_step) * per_step
    elif steps:
        batches_left = (state.max_epochs - state.epoch - 1) * steps + steps - batch - 1
    else:
        return None
    evaluations = -(-batches_left // (eval_every * per_step)) if eval_every else state.max_epochs - state.epoch
    return batches_left * seconds_per_batch + evaluations * seconds_per_evaluation


def format_seconds(seconds: float) -> str:
    """``192.4`` -> ``"0:03:12"``; a negative time (a run past its planned steps: an epoch that takes more steps
    while fewer replica groups are alive) as ``0:00:00``."""
    return str(datetime.timedelta(seconds=max(0, round(seconds))))


class EvaluationClock:
    """How long the last evaluation took, all its test sets together: from its first test set's
    beginning (``test_begin``, called for each) to its end (``evaluation_end``)."""

    def __init__(self):
        self.last_seconds = 0.0
        self._started = None

    def test_begin(self) -> None:
        if self._started is None:
            self._started = time.perf_counter()

    def evaluation_end(self) -> None:
        if self._started is not None:
            self.last_seconds = time.perf_counter() - self._started
        self._started = None
