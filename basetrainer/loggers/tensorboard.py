"""TensorBoard scalars, handed to the writer in batches."""
import math
import time

from .base import Logger, epoch_scalars


class TensorBoardLogger(Logger):
    """Writes the per-step scalars and the epoch records as TensorBoard scalars in ``log_dir``.

    A resumed run opens the writer with ``purge_step`` at the step it starts from, so
    TensorBoard hides what the interrupted run logged from there on (the steps run again).

    Each log point's scalars become one event (tensorboard checksums each event in pure
    Python: one per log point costs a fraction of one per scalar), stamped with the time
    it was logged. The queue goes to the writer at each epoch end, at the end of
    training, and once its oldest event is ``HAND_OVER_SECS`` old. Each event given to
    the SummaryWriter wakes its writer thread, which then competes with training for the
    GIL: handed over once per log line, that cost ~7% of a small model's steps here;
    batched, it is lost in the noise. An epoch end also flushes the writer to disk (which
    it otherwise does every 120 s) unless it did so less than ``FLUSH_SECS`` ago: an
    epoch's values reach TensorBoard within that time and one more epoch, and short
    epochs do not each wait for the disk.
    """

    name = "tensorboard"
    HAND_OVER_SECS = 30.0  # per-step scalars wait at most this long for the writer
    FLUSH_SECS = 10.0  # epoch ends flush the writer to disk at most this often

    def __init__(self, log_dir):
        self.log_dir = str(log_dir)
        self._writer = None
        self._purge_step = None
        self._events = []  # (Summary, step, wall time) not yet handed to the writer
        self._last_flush = -math.inf

    def start(self, history, resumed, step):
        self._purge_step = step if resumed else None

    def log_metrics(self, scalars, step):
        self._queue(scalars, step)
        if time.time() - self._events[0][2] >= self.HAND_OVER_SECS:
            self._hand_over()

    def log_epoch(self, record, step):
        now = self._queue(epoch_scalars(record), step)
        self._hand_over(flush=now - self._last_flush >= self.FLUSH_SECS)

    def log_text(self, name, text, step):
        self._hand_over()  # the scalars before it first, in step order
        self._summary_writer().add_text(name, f"```\n{text}\n```", step)  # a code block keeps the lines

    def close(self, failed=False):
        # After a crash too: the step scalars up to a NaN loss are what one wants to look at.
        if self._events:
            self._hand_over()
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _queue(self, scalars, step) -> float:
        from tensorboard.compat.proto.summary_pb2 import Summary
        from torch.utils.tensorboard.summary import scalar

        values = [value for tag, number in scalars.items() for value in scalar(tag, number).value]
        now = time.time()
        self._events.append((Summary(value=values), step, now))
        return now

    def _hand_over(self, flush=False):
        writer = self._summary_writer()
        for summary, step, walltime in self._events:
            writer.file_writer.add_summary(summary, step, walltime)
        self._events.clear()
        if flush:
            writer.flush()
            self._last_flush = time.time()

    def _summary_writer(self):
        """The SummaryWriter, created on first use."""
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(self.log_dir, purge_step=self._purge_step)
        return self._writer
