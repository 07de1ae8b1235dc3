"""The profiler: a few training batches under ``torch.profiler``, written as a trace for Chrome and TensorBoard.

The trainer adds :class:`Profiler` itself when the config says ``profile: true`` or
``profile_steps: [wait, warmup, active]``; otherwise nothing of this module runs.
"""
import os

from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

from ..distributed import comm
from ..utils.log import RESULT, get_logger
from .events import LOWEST, Callback


def profile_dir(work_dir) -> str:
    """Where the traces go: ``<work_dir>/log/profile``, beside the run's other logs; for a
    config without ``work_dir`` (a trainer of one's own), ``log/profile`` in the current folder."""
    return os.path.join(work_dir or os.curdir, "log", "profile")


class Profiler(Callback):
    """Traces ``wait + warmup + active`` training batches with ``torch.profiler``, once, from the run's first batch.

    The profiler's schedule advances at every batch end: the first ``wait`` batches run
    untraced (the first batch pays for lazy set-up), the next ``warmup`` are traced and
    thrown away (the tracer's own start-up), the next ``active`` are kept. Each rank then
    writes ``rank<r>.<time>.pt.trace.json`` to ``out_dir`` with torch's
    ``tensorboard_trace_handler``: a Chrome trace (chrome://tracing, ui.perfetto.dev),
    which is also the file TensorBoard's profiler plugin reads (``pip install
    torch-tb-profiler``, then ``tensorboard --logdir <out_dir>``). The main process logs
    the table of the operators that took the most self time (on the GPU when there is
    one), as a result line. A run that ends, or fails, inside the window writes what it
    traced so far.
    """

    priority = LOWEST  # a batch ends after every other callback's work at that batch's end

    def __init__(self, steps, out_dir, row_limit: int = 15):
        super().__init__()
        self.wait, self.warmup, self.active = steps
        self.out_dir = out_dir
        self.row_limit = row_limit
        self._profiler = None

    def on_train_begin(self, logs=None):
        on_gpu = self.trainer.device.type == "cuda"
        self._sort_by = "self_device_time_total" if on_gpu else "self_cpu_time_total"
        self._write_trace = tensorboard_trace_handler(self.out_dir, worker_name=f"rank{comm.get_rank()}")
        self._profiler = profile(
            activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if on_gpu else [])],
            schedule=schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1),
            on_trace_ready=self._trace_ready, record_shapes=True)
        self._profiler.start()

    def on_batch_end(self, batch, logs=None):
        self._profiler.step()

    def on_train_end(self, logs=None):
        self._stop()

    def on_exception(self, error, logs=None):
        self._stop()

    def _stop(self):
        if self._profiler is not None:
            self._profiler.stop()  # writes the trace when the run ended inside the window
            self._profiler = None

    def _trace_ready(self, profiler):
        self._write_trace(profiler)
        if comm.is_main_process():
            table = profiler.key_averages().table(sort_by=self._sort_by, row_limit=self.row_limit)
            get_logger().info("profiler: trace written to %s; the operators by self time:\n%s",
                              os.path.abspath(self.out_dir), table, extra=RESULT)
