"""What callbacks may ask the trainer for, and the trainer's whole state: the requests half of
:class:`~basetrainer.engine.trainer.EngineTrainer`.

The checkpoint requests are the checkpoint manager's (``self.checkpoints``, see
:class:`~basetrainer.checkpoint.manager.CheckpointManager`), handed the run's stateful parts
here; the events that carry them are documented on :class:`~basetrainer.engine.events.Callback`.
"""
from ..checkpoint import parts
from ..config import to_plain
from ..data import loaders as data
from ..data.streaming.position import stream_parts
from ..distributed import comm
from ..utils.seeding import seed_everything
from . import evaluation
from .elastic import DataLayout
from .state import log_resume


class TrainerRequests:
    """Mixed into :class:`~basetrainer.engine.trainer.EngineTrainer`: ``request_stop``, the checkpoint
    requests, ``state_dict``/``load_state_dict``, the resume, and the loaders a recorder asks about."""

    # False: training checkpoints leave out the parameters that do not train (requires_grad false, a LoRA run's
    # base model), which the model build_model makes again holds when the run resumes; exported weights are whole.
    checkpoint_frozen_weights = True

    def request_stop(self) -> None:
        """Ends training after the current batch; the epoch's evaluation and end events still run."""
        self.state.stop_requested = True

    def save_checkpoint(self, path=None) -> str:
        """Writes the full training state to ``path`` (default: the path set by :meth:`set_checkpoint_path`).
        Every rank calls it (see :meth:`CheckpointManager.save <basetrainer.checkpoint.manager.CheckpointManager.save>`)."""
        self._track_checkpoint_parts()
        with self.watchdog.phase("save"):
            return self.checkpoints.save(path)

    def set_checkpoint_path(self, path) -> None:
        """Where a stop signal saves the training state, and where ``resume: auto`` looks first."""
        self.checkpoints.set_path(path)

    def export_weights(self) -> dict:
        """The weights to ship: those of the provider set with :meth:`set_export_weights`
        (an EMA's average), else the model's; CPU tensors, keys without wrapper prefixes."""
        self._track_checkpoint_parts()
        return self.checkpoints.export_weights()

    def set_export_weights(self, provider) -> None:
        self.checkpoints.set_export_weights(provider)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """The whole training state (every rank calls it; see :class:`~basetrainer.checkpoint.manager.CheckpointManager`)."""
        self._track_checkpoint_parts()
        return self.checkpoints.state_dict()

    def load_state_dict(self, state: dict, name: str = "the checkpoint") -> None:
        self._track_checkpoint_parts()
        self.checkpoints.load_state_dict(state, name)

    def resume_or_seed(self):
        """Loads the checkpoint ``cfg.resume`` names ("auto": the newest last.pth; in a replica group's job started
        afresh, the newest this job wrote), else seeds per rank."""
        self._track_checkpoint_parts()
        path = self.checkpoints.resume(self.replica_groups.files_since if self.replica_groups is not None else None)
        if path is None:
            seed_everything(self.seed + self.rank)  # dropout, augmentation: per rank, reproducibly
        elif self.is_main_process:
            log_resume(path, self.state)
        if self.replica_groups is not None:  # behind the live groups (a restart): their state, from memory
            self.replica_groups.join(lambda: self.checkpoints.state_dict(rank_only=True),
                                     lambda state: self.checkpoints.load_state_dict(
                                         state, name="a live replica group's training state"))

    def checkpoint_manager(self):
        """The :class:`~basetrainer.checkpoint.manager.CheckpointManager` with this trainer's parts handed over as they
        are now: what a checkpoint saved now would hold (the tuning tools hold the same parts in memory)."""
        self._track_checkpoint_parts()
        return self.checkpoints

    def _track_checkpoint_parts(self):
        """Hands the checkpoint manager what a training checkpoint holds, in the order a resume loads it."""
        state = self.state

        def reseed():  # another number of processes wrote the streams: each rank starts its own afresh
            seed_everything(self.seed + self.rank + 7919 * state.start_epoch)

        self.checkpoints.track(parts.ModelAndOptimizer(self.strategy, self.model, self.optimizer,
                                                       frozen_weights=self.checkpoint_frozen_weights), {
            "scaler": parts.ScalerState(self.scaler),
            "callbacks": parts.CallbackStates(self.callbacks),
            "run": state,
            "layout": DataLayout(self.train_loader, state, comm.get_data_parallel_world_size()),
            **stream_parts(self.train_loader, state, comm.get_data_parallel_world_size()),  # shards: which ones
            **({"lr_scaling": self.lr_scaling} if self.lr_scaling is not None else {}),  # after the layout it reads
            "config": parts.ConfigRecord(to_plain(self.cfg), self.resume_settings),
            **self.strategy.checkpoint_parts(),
            **(self.replica_groups.checkpoint_parts() if self.replica_groups is not None else {}),
        }, position=state.position, reseed=reseed)

    def loader(self, phase: str):
        """The data loader of ``phase``: "train", or "test": the test set being evaluated, or
        outside evaluation the first (None without a test loader)."""
        if phase == "train":
            return self.train_loader
        sets = dict(evaluation.test_sets(self.test_loader))
        return sets.get(self.state.eval_set, next(iter(sets.values()), None))

    def is_sharded(self, phase: str) -> bool:
        """Whether each rank sees different samples in ``phase`` ("train"/"test"): metrics then sum over ranks."""
        return data.is_sharded(self.loader(phase))

