"""Pre-emption: a stop signal (SIGTERM, SIGUSR1) makes every rank save the training state and stop."""
import signal

import torch

from ..errors import TrainingInterrupted
from . import comm, signals


class Preemption:
    """Watches for stop signals while training runs, and stops training cleanly when one came.

    Clusters send SIGTERM before pre-empting a job and SIGUSR1 before a time limit. The
    signal handler only records the signal; the loop calls :meth:`check` after every
    batch, and at an optimizer-step boundary that every rank agrees on (one all-reduce
    every ``check_every`` steps, and at an epoch's last batch, when there are several
    processes) the trainer saves the training state and raises ``TrainingInterrupted``
    (exit code 75: rerun with ``resume: auto``).
    """

    def __init__(self, world_size: int, check_every: int):
        self.world_size = world_size
        self.check_every = check_every
        self.signum = None

    def watching(self):
        """While inside, a stop signal is recorded instead of ending the process."""
        return signals.handling(self._record)

    def _record(self, signum, frame):
        self.signum = signum

    def check(self, trainer) -> None:
        """Saves and stops when a stop signal came to any rank (called after each batch)."""
        if self.signum is None and self.world_size == 1:
            return
        state = trainer.state
        if state.accumulating:
            return
        if self.world_size > 1:
            if state.global_step % self.check_every and state.batch + 1 != state.batches_per_epoch:
                return
            flag = torch.tensor([int(self.signum is not None)], device=trainer.device)
            if not comm.all_reduce_max(flag)[0]:
                return
        self.stop(trainer)

    def stop(self, trainer):
        """Saves the training state (when a checkpoint path is set) and raises TrainingInterrupted."""
        state = trainer.state
        state.loss_tally.fold()
        where = (f"saved {trainer.save_checkpoint()}" if trainer.checkpoint_path
                 else "no ModelCheckpoint callback, nothing saved")
        name = signal.Signals(self.signum).name if self.signum else "a stop request"
        raise TrainingInterrupted(f"stopped by {name} at epoch {state.epoch + 1}, batch {state.batch + 1} ({where}); "
                                  f"rerun with resume: auto to continue")
