"""Pre-emption: a stop signal (SIGTERM, SIGUSR1) in any phase makes every rank save the training state and stop.

The phases and how long a stop waits in each (the signal itself only sets a flag, see
:mod:`basetrainer.distributed.signals`):

- start-up (building the loaders and the model, loading a checkpoint): until start-up
  ends; nothing is saved, as nothing has been trained since the checkpoint on disk;
- training: until the current optimizer step ends (with several processes, until the
  next of the steps where the ranks compare flags: every ``stop_check_every`` steps and
  at an epoch's last batch);
- evaluation: until the current test batch ends (several processes: every
  ``stop_check_every`` test batches); the evaluation is abandoned, its partial results
  are dropped, and the resumed run does it again;
- a checkpoint save: never interrupted; the stop follows the save.

Then the trainer saves ``last.pth`` (unless it already holds exactly this state), on SIGUSR1
under SLURM the job requeues itself (``scontrol requeue $SLURM_JOB_ID``, when
``slurm_requeue`` is on and the job allows it) and ``TrainingInterrupted`` ends the run
with exit code 75: rerun with ``resume: auto`` (a requeued job does so by itself).

:class:`Preemption` decides when to stop (every rank the same) and how to end the run; the
trainer, which owns what is saved, saves in between.
"""
import contextlib
import os
import signal
import subprocess
import weakref

import torch

from ..data import loaders as data
from ..distributed import comm, signals
from ..errors import TrainingInterrupted
from ..utils.log import get_logger

logger = get_logger()


class Preemption:
    """Stops one run cleanly when a stop signal came; stop signals are recorded from its construction on,
    until the run's scope (:meth:`~basetrainer.engine.preemption.Preemption.watching`) ends or the object is
    collected, whichever comes first."""

    def __init__(self, world_size: int, check_every: int, requeue: bool = True, device=torch.device("cpu")):
        self.world_size = world_size
        self.check_every = check_every
        self.requeue = requeue
        self.device = device  # where the ranks' flags are compared
        self.agreed = None  # the stop signal the ranks agreed on (the highest number any of them received)
        self._end_start_up = signals.record()
        weakref.finalize(self, self._end_start_up)  # a trainer that is never run records no longer than it lives

    @property
    def signum(self):
        return signals.received()

    @contextlib.contextmanager
    def watching(self):
        """The run's scope: stop signals are recorded while inside, and no longer after it (start-up included)."""
        with signals.recording():
            self._end_start_up()
            yield

    def check_start_up(self) -> None:
        """Stops, saving nothing, when a stop signal came during start-up (to any rank)."""
        if self._agreed():
            self.interrupt("during start-up (nothing trained yet, nothing to save)")

    def stop_due(self, state, epoch_end: bool = False) -> bool:
        """Whether a stop signal came to any rank, asked after each batch (``state`` is the run state) and
        at each epoch end. Under several processes the ranks compare flags only at some steps (every
        ``check_every`` optimizer steps, at an epoch's last batch and end), never inside an accumulation window."""
        if self.world_size == 1 and signals.received() is None:
            return False
        if state.accumulating:
            return False
        agreeing = (self.world_size == 1 or epoch_end or state.global_step % self.check_every == 0
                    or state.batch + 1 == state.batches_per_epoch)
        return agreeing and self._agreed()

    def evaluation_check(self, loader):
        """``stop(batch)`` for one test set: whether a stop signal ends the evaluation after test batch
        ``batch``. Under several processes the ranks compare flags every ``check_every`` batches,
        among the batches all of them evaluate (their shards may differ by a batch)."""
        if self.world_size == 1:
            return lambda batch: self.signum is not None
        shortest = torch.tensor([-data.num_batches(loader)], device=self.device)
        common = -int(comm.all_reduce_max(shortest)[0])
        return lambda batch: (batch + 1) % self.check_every == 0 and batch < common and self._agreed()

    def interrupt(self, where):
        """Raises TrainingInterrupted for the stop signal, ``where`` saying where it stopped (after
        requeueing the job, for SIGUSR1 under SLURM)."""
        signum = self.agreed or self.signum
        name = signum.name if signum else "a stop request"
        requeued = self._requeue() if signum == getattr(signal, "SIGUSR1", None) else ""
        signals.consume()  # acted on: this run stops for it, a later one in this process must not
        raise TrainingInterrupted(f"stopped by {name} {where}; {requeued or 'rerun with resume: auto to continue'}")

    def _agreed(self) -> bool:
        """Whether a stop signal came to any rank (one all-reduce when there are several)."""
        if self.world_size == 1:
            self.agreed = self.signum
        else:
            received = comm.all_reduce_max(torch.tensor([int(self.signum or 0)], device=self.device))
            self.agreed = signal.Signals(int(received[0])) if received[0] else None
        return self.agreed is not None

    def _requeue(self) -> str:
        """Under SLURM, puts the job back in the queue (the main process, after every rank saved)."""
        job = os.environ.get("SLURM_JOB_ID")
        if not self.requeue or not job:
            return ""
        if not comm.is_main_process():
            return "the main process requeues the job"
        try:
            done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as error:
            logger.warning("could not requeue SLURM job %s: %s", job, error)
            return ""
        if done.returncode != 0:
            logger.warning("scontrol requeue %s failed (the job may not allow requeueing: sbatch --requeue): %s",
                           job, (done.stderr or done.stdout).strip())
            return ""
        return f"requeued SLURM job {job}: it resumes with resume: auto"

