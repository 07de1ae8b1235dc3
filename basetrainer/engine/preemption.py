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

Then ``last.pth`` is written (unless it already holds exactly this state), on SIGUSR1
under SLURM the job requeues itself (``scontrol requeue $SLURM_JOB_ID``, when
``slurm_requeue`` is on and the job allows it) and ``TrainingInterrupted`` ends the run
with exit code 75: rerun with ``resume: auto`` (a requeued job does so by itself).
"""
import contextlib
import os
import signal
import subprocess
import weakref

import torch

from ..checkpoint.rng import set_rng_state
from ..data import loaders as data
from ..distributed import comm, signals
from ..errors import TrainingInterrupted
from ..utils.log import get_logger
from . import resume

logger = get_logger()


class Preemption:
    """Stops one trainer cleanly when a stop signal came; stop signals are recorded from its construction on."""

    def __init__(self, owner, world_size: int, check_every: int, requeue: bool = True):
        self.world_size = world_size
        self.check_every = check_every
        self.requeue = requeue
        self.agreed = None  # the stop signal the ranks agreed on (the highest number any of them received)
        self._end_start_up = signals.record()
        weakref.finalize(owner, self._end_start_up)  # a trainer that is never run records no longer than it lives

    @property
    def signum(self):
        return signals.received()

    @contextlib.contextmanager
    def watching(self):
        """The run's scope: stop signals are recorded while inside, and no longer after it (start-up included)."""
        with signals.recording():
            self._end_start_up()
            yield

    def check_start_up(self, trainer) -> None:
        """Stops, saving nothing, when a stop signal came during start-up (to any rank)."""
        if self._agreed(trainer.device):
            self.interrupt(trainer, "during start-up (nothing trained yet, nothing to save)")

    def check(self, trainer, epoch_end: bool = False) -> None:
        """Saves and stops when a stop signal came to any rank (called after each batch and epoch)."""
        if self.signum is None and self.world_size == 1:
            return
        state = trainer.state
        if state.accumulating:
            return
        agreeing = (self.world_size == 1 or epoch_end or state.global_step % self.check_every == 0
                    or state.batch + 1 == state.batches_per_epoch)
        if agreeing and self._agreed(trainer.device):
            self.stop(trainer)

    def evaluation_check(self, trainer, loader):
        """``stop(batch)`` for one test set: whether a stop signal ends the evaluation after test batch
        ``batch``. Under several processes the ranks compare flags every ``check_every`` batches,
        among the batches all of them evaluate (their shards may differ by a batch)."""
        if self.world_size == 1:
            return lambda batch: self.signum is not None
        shortest = torch.tensor([-data.num_batches(loader)], device=trainer.device)
        common = -int(comm.all_reduce_max(shortest)[0])
        return lambda batch: (batch + 1) % self.check_every == 0 and batch < common and self._agreed(trainer.device)

    def stop(self, trainer, evaluation_pending=None, rng=None):
        """Saves the training state (when a checkpoint path is set) and raises TrainingInterrupted.

        ``evaluation_pending``: a stop during an evaluation during training, which the resumed
        run does again ("batch": the one before ``on_batch_end``, "end": the one after the
        epoch's batches); ``rng``: the random streams as that evaluation found them.
        """
        state = trainer.state
        state.loss_tally.fold()
        if rng is not None:
            set_rng_state(rng)
        state.evaluation_pending = evaluation_pending
        if not trainer.checkpoint_path:
            where = "no ModelCheckpoint callback, nothing saved"
        elif trainer.saved_position == resume.position(trainer):
            where = f"{trainer.checkpoint_path} holds this state already"
        else:
            where = f"saved {trainer.save_checkpoint()}"
        during = "during evaluation " if evaluation_pending else ""
        self.interrupt(trainer, f"{during}at epoch {state.epoch + 1}, batch {state.batch + 1} ({where})")

    def interrupt(self, trainer, where):
        """Raises TrainingInterrupted for the stop signal, ``where`` saying where it stopped (after
        requeueing the job, for SIGUSR1 under SLURM)."""
        signum = self.agreed or self.signum
        name = signum.name if signum else "a stop request"
        requeued = self._requeue() if signum == getattr(signal, "SIGUSR1", None) else ""
        raise TrainingInterrupted(f"stopped by {name} {where}; {requeued or 'rerun with resume: auto to continue'}")

    def _agreed(self, device) -> bool:
        """Whether a stop signal came to any rank (one all-reduce when there are several)."""
        if self.world_size == 1:
            self.agreed = self.signum
        else:
            received = comm.all_reduce_max(torch.tensor([int(self.signum or 0)], device=device))
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

