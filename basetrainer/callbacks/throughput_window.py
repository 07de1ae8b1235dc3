"""ThroughputWindow: what the training batches between two log lines achieved (loss, speed, data wait, memory, FLOP/s)."""
import time

from ..distributed import comm
from ..parallel import unwrap_model
from ..utils import throughput
from ..utils.plots import as_float


class ThroughputWindow:
    """Measures a window of training batches: from one log line's batch to the next one's.

    Its scalars (see :meth:`close`) are ``train/loss_step`` (the mean loss over the window's
    batches and over all ranks, from the run state's loss tally, so nothing is recorded per
    step), ``train/lr``, ``train/samples_per_s`` (all ranks), ``train/data_wait`` (the share of
    the time spent waiting for batches, from one batch's end to the next one's start),
    ``train/peak_memory_gib`` (allocated GPU memory on CUDA, the resident set on the CPU),
    ``train/flops_per_s`` (the model's training FLOPs per sample, 3x one forward pass counted
    on the first batch, times samples/s) and ``train/mfu`` (their share of the GPUs' peak, for
    the GPUs :data:`~basetrainer.utils.throughput.PEAK_TFLOPS` knows); the last three are left
    out where they cannot be had.
    """

    def __init__(self):
        self._flops = None  # counts the model's FLOPs on the first batch, then None
        self._flops_per_sample = self._peak_flops = None
        self._tally_before = None
        self._first_batch = 0
        self._data_seconds = 0.0
        self._started = self._last_batch_end = time.perf_counter()

    def start(self, model, device, amp) -> None:
        """At the beginning of training: the FLOPs of ``model``'s next forward pass are counted."""
        self._flops = throughput.ForwardFlops(model, unwrap_model(model))
        self._peak_flops = throughput.peak_flops(device, amp)

    def reset(self, state, device, first_batch=0, tally_now=None) -> None:
        """Starts the next window at ``first_batch``: its losses are what the run state's loss tally sums
        from here on. ``tally_now``: the tally's ``(loss_sum, batches, samples)`` if just read, else read here."""
        if tally_now is None and state is not None:
            loss_sum, _, batches, samples = state.loss_tally.totals(device)
            tally_now = (loss_sum, batches, samples)
        self._tally_before = tally_now
        self._first_batch = first_batch
        self._data_seconds = 0.0
        self._started = self._last_batch_end = time.perf_counter()

    def batch_begin(self) -> None:
        self._data_seconds += time.perf_counter() - self._last_batch_end

    def batch_end(self) -> None:
        self._last_batch_end = time.perf_counter()

    def close(self, state, device, batch):
        """Ends the window at ``batch`` and starts the next: ``(scalars, seconds_per_batch)``, scalars None
        when every batch of the window was a skipped step. Every rank calls it at the same batches: it
        joins one all-reduce, and a sharded model's forward, counted once, gathers its parameters."""
        sum_before, batches_before, samples_before = self._tally_before
        loss_sum, _, batches, samples = state.loss_tally.totals(device)
        tally_now = (loss_sum, batches, samples)
        loss_sum, count, samples = comm.sum_over_ranks(loss_sum - sum_before, batches - batches_before,
                                                       samples - samples_before)
        elapsed = max(time.perf_counter() - self._started, 1e-9)
        data_share = self._data_seconds / elapsed
        seconds_per_batch = elapsed / (batch + 1 - self._first_batch)
        if self._flops is not None:
            self._flops_per_sample = self._flops.count()
            self._flops = None
        self.reset(state, device, batch + 1, tally_now)  # the counting is in no window
        if not count:
            return None, seconds_per_batch
        return self._scalars(state, device, loss_sum / count, samples / elapsed, data_share), seconds_per_batch

    def stop_counting(self) -> None:
        """Removes the FLOP counter if the first batch never came."""
        if self._flops is not None:
            self._flops.remove()
            self._flops = None

    def model_flops(self, samples_per_s) -> dict:
        """``{"flops_per_s", "mfu"}`` at ``samples_per_s`` (all ranks), from the FLOPs counted on the first batch
        and the GPUs' peak: each left out where it cannot be had (before the first line, a GPU not known)."""
        if not self._flops_per_sample or not samples_per_s:
            return {}
        flops = 3 * self._flops_per_sample * samples_per_s  # forward and backward: ~3 forward passes
        if not self._peak_flops:
            return {"flops_per_s": flops}
        return {"flops_per_s": flops, "mfu": flops / (self._peak_flops * comm.get_world_size())}

    def _scalars(self, state, device, loss, speed, data_share) -> dict:
        scalars = {"train/loss_step": loss, "train/lr": as_float(state.lr), "train/samples_per_s": speed,
                   "train/data_wait": data_share}
        memory = throughput.peak_memory(device)
        if memory is not None:
            scalars["train/peak_memory_gib"] = memory / 2 ** 30
        scalars.update({f"train/{name}": value for name, value in self.model_flops(speed).items()})
        return scalars
