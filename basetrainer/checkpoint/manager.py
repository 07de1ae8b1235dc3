"""The checkpoint manager: one object that owns what a training checkpoint holds and where it goes.

The trainer hands it the run's stateful parts (:meth:`CheckpointManager.track`): the model and
optimizer through the parallel strategy, and named parts each adding its entries to the
checkpoint (see :mod:`.parts`; the engine adds its run state and data layout). The manager
owns the rest:

- where the training state goes: ``path`` (set by a checkpoint callback; a stop signal
  saves there, and ``resume: auto`` looks there first), and whether the file there already
  holds the run's current position (a stop right after a save writes nothing again);
- how it is written: one file written atomically by the main process, keeping the file it
  replaces as ``last.prev.pth``, both with checksums (:mod:`.files`); or, under FSDP and with
  ``asynchronous``, a DCP directory every rank writes its shards to, in the background when
  asked (:mod:`.sharded`);
- which checkpoint a run resumes from (:mod:`.discovery`), and loading it into every part;
- every rank's random streams, which a resumed run gets back when the loop is ready for them
  (:meth:`~basetrainer.checkpoint.manager.CheckpointManager.restore_random_streams`);
- the weights to export (the model's, or a provider's such as an EMA's average).
"""
import os

from .. import __version__
from ..distributed import comm
from . import discovery, files
from .parts import RandomStreams


class CheckpointManager:
    """Saves and resumes one run's training state.

    ``resume``: None (start afresh), a path, or "auto"; ``work_dir``: where ``resume: auto`` looks
    besides ``path``; ``sharded``: write DCP directories of per-rank shards instead of one
    file; ``asynchronous``: write them in the background while training goes on.
    """

    def __init__(self, resume=None, work_dir=None, sharded: bool = False, asynchronous: bool = False):
        self.resume_from, self.work_dir = resume, work_dir
        self.sharded, self.asynchronous = sharded or asynchronous, asynchronous
        self._writer = None  # the ShardedCheckpointer, made on first use
        self.path = None  # where the training state is saved by default, and where resume: auto looks first
        self.saved_position = None  # the run position the file at ``path`` holds, when this run wrote it
        self.model = None  # the ModelAndOptimizer part
        self.parts = {}  # name -> part, in the order a resume loads them
        self.position = lambda: None  # where a training state saved now would resume
        self.random_streams = RandomStreams(comm.get_rank(), comm.get_world_size())
        self._export_weights = None

    def track(self, model, parts: dict, position, reseed) -> None:
        """Hands over what a checkpoint holds: ``model`` (a :class:`~.parts.ModelAndOptimizer`), the other
        ``parts`` by name (loaded in this order, before the random streams), ``position()``, the run's
        position (two saves at the same position hold the same state), and ``reseed()``, which seeds
        this rank afresh when a checkpoint's random streams cannot be matched to ranks."""
        self.model, self.parts, self.position = model, dict(parts), position
        self.random_streams.reseed = reseed

    def set_path(self, path) -> None:
        self.path = path

    # ------------------------------------------------------------------ saving
    def state_dict(self, with_weights: bool = True, rank_only: bool = False) -> dict:
        """The whole training state (every rank calls it: parts gather over ranks). ``with_weights=False``
        leaves out the model and the optimizer (a sharded checkpoint saves those itself). ``rank_only``: this
        rank's alone, gathering nothing (its own random streams in its place), as it hands the same rank of another
        replica group, which asks at a time of its own (see :mod:`basetrainer.fault_tolerance`; full weights on
        every rank under DDP, not shards)."""
        saved = {"basetrainer_version": __version__}
        for part in self.parts.values():
            saved.update(part.state_dict())
        saved.update(self.random_streams.own_state_dict() if rank_only else self.random_streams.state_dict())
        saved.update(self.model.state_dict() if with_weights else self.model.architecture())
        return saved

    def save(self, path=None) -> str:
        """Writes the training state to ``path`` (default ``path``); every rank calls it. Returns what
        was written: the file, or the sharded directory."""
        path = path or self.path
        if path == self.path:
            self.saved_position = self.position()
        if self.sharded:
            loop_state = self.state_dict(with_weights=False)  # first: the parts' own state, not the average swapped in
            with self.model.strategy.averaged_weights(self.model.model):
                return self._sharded_writer().save(self.model.model, self.model.optimizer, path, loop_state,
                                                   trainable_only=not self.model.frozen_weights)
        saved = self.state_dict()
        if comm.is_main_process():
            files.save_checkpoint(saved, path, keep_previous=True)
        comm.synchronize()
        return path

    def save_for_stop(self) -> str:
        """Saves at ``path`` unless it holds this position already; says what it did, for the log."""
        if not self.path:
            return "no ModelCheckpoint callback, nothing saved"
        if self.saved_position == self.position():
            return f"{self.path} holds this state already"
        return f"saved {self.save()}"

    def wait(self, quietly: bool = False) -> None:
        """Returns once a checkpoint written in the background is complete (see
        :meth:`~basetrainer.checkpoint.sharded.ShardedCheckpointer.wait`)."""
        if self._writer is not None:
            self._writer.wait(quietly=quietly)

    def _sharded_writer(self):
        """The writer of sharded checkpoints, made on first use: a run that writes and reads none does not import
        ``torch.distributed.checkpoint`` (a second at every process's start)."""
        if self._writer is None:
            from .sharded import ShardedCheckpointer
            self._writer = ShardedCheckpointer(asynchronous=self.asynchronous)
        return self._writer

    # ------------------------------------------------------------------ resuming
    def resume(self, written_since=None):
        """Loads the checkpoint ``resume`` names into every part; returns its path, or None when the run
        starts afresh. A SLURM job requeued after a stop signal resumes as with ``resume: auto``.
        ``written_since`` (seconds since the epoch): ``resume: auto`` passes over checkpoints written before, another
        run's (a replica group's job started afresh in a used work_dir)."""
        resume = self.resume_from
        if resume is None and int(os.environ.get("SLURM_RESTART_COUNT") or 0) > 0:
            resume = "auto"
        path, saved = discovery.pick_checkpoint(resume, [self.path], self.work_dir, written_since)
        if path is None:
            return None
        if saved is None:  # sharded: the model and the optimizer go straight into their shards
            saved = self._sharded_writer().load(self.model.model, self.model.optimizer, path,
                                                trainable_only=not self.model.frozen_weights)
            self.load_state_dict(saved, name=path, with_weights=False)
        else:
            self.load_state_dict(saved, name=path)
        return path

    def load_state_dict(self, saved: dict, name: str = "the checkpoint", with_weights: bool = True) -> None:
        """Puts ``saved`` (a :meth:`state_dict`) back into every part."""
        if with_weights:
            self.model.load_state_dict(saved, name)
        for part in (*self.parts.values(), self.random_streams):
            part.load_state_dict(saved, name)

    def restore_random_streams(self) -> None:
        """Puts back the random streams of the checkpoint a run resumed from (once; the loop calls it after
        positioning the loader, so that batches it skips draw nothing)."""
        self.random_streams.restore()

    # ------------------------------------------------------------------ export
    def export_weights(self) -> dict:
        """The weights to ship: the provider's set with :meth:`set_export_weights` (an EMA's average),
        else the model's; CPU tensors, keys free of wrapper prefixes."""
        if self._export_weights is not None:
            return self._export_weights()
        return self.model.weights()

    def set_export_weights(self, provider) -> None:
        self._export_weights = provider

