"""RunThroughput: a run's training rate two ways, over the whole run and in steady state."""
import time

from ..distributed import comm

#: How many training batches of a run its steady-state rate leaves out. The first batches hold compilation
#: (with ``compile`` on, 70 s for a 12 x 768 language model, whose whole-run rate was then a tenth of its
#: steps' rate), the first allocations and the loader workers' start.
STEADY_AFTER_BATCHES = 10


class RunThroughput:
    """The training samples per second of one ``run()``, on all processes together:

    - **whole run**: this run's samples over the seconds since training began (after start-up and the
      resume): compilation, evaluations, checkpoints and data waits included, what the run cost;
    - **steady state**: the samples of the training batches after the first ``steady_after`` over those
      batches' own seconds (each from the previous batch's end, or its epoch's start, to its own end: data
      waits included, evaluations left out), what a longer run gets per second; None until a batch has
      counted.

    The owner calls the methods named after the events (LogHistory does, and so can a callback of one's own);
    ``state`` is the trainer's run state. Samples on all processes are each process's times the data-parallel
    processes (the sampler gives each as many), so that nothing is exchanged between ranks.
    """

    def __init__(self, steady_after: int = STEADY_AFTER_BATCHES):
        self.steady_after = steady_after
        self._start(samples_seen=0)

    def _start(self, samples_seen: int) -> None:
        self._started = self._batch_started = time.perf_counter()
        self._samples_at_start, self._batches = samples_seen, 0
        self._steady_from = None  # samples seen when the steady state began
        self._steady_seconds = self._evaluating_seconds = 0.0
        self._evaluation_started = None

    def train_begin(self, state) -> None:
        self._start(state.samples_seen)

    def epoch_begin(self) -> None:
        self._batch_started, self._evaluating_seconds = time.perf_counter(), 0.0

    def test_begin(self) -> None:
        if self._evaluation_started is None:
            self._evaluation_started = time.perf_counter()

    def evaluation_end(self) -> None:
        if self._evaluation_started is not None:
            self._evaluating_seconds += time.perf_counter() - self._evaluation_started
        self._evaluation_started = None

    def batch_end(self, state) -> None:
        now = time.perf_counter()
        self._batches += 1
        if self._steady_from is not None:
            self._steady_seconds += now - self._batch_started - self._evaluating_seconds
        elif self._batches >= self.steady_after:
            self._steady_from = state.samples_seen  # the steady state starts with the next batch
        self._batch_started, self._evaluating_seconds = now, 0.0

    def samples(self, state) -> int:
        """This run's training samples so far, on all processes."""
        return (state.samples_seen - self._samples_at_start) * comm.get_data_parallel_world_size()

    def seconds(self) -> float:
        """Seconds since training began."""
        return time.perf_counter() - self._started

    def whole_run(self, state):
        """Samples per second over the whole run so far; None before its first sample."""
        samples = self.samples(state)
        return samples / self.seconds() if samples else None

    def steady(self, state):
        """Samples per second in steady state so far; None before a batch after the first ``steady_after``."""
        if self._steady_from is None or self._steady_seconds <= 0:
            return None
        return (state.samples_seen - self._steady_from) * comm.get_data_parallel_world_size() / self._steady_seconds
