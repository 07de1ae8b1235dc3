"""EngineTrainer: the training loop.

A user subclass fills in six ``build_*`` hooks and calls ``self.build(cfg)``; ``run()`` then trains. The loop
reads top to bottom: ``run`` -> ``train_epoch`` -> ``train_step`` -> ``optimizer_step``, and ``test_epoch``.
Where a user would change behaviour:

- a custom forward or loss, or another batch layout: override ``run_step`` (it returns
  ``outputs, losses``; batches reach it already on the device);
- observing or steering training (metrics, logging, LR, checkpoints): a ``Callback``
  (see :mod:`basetrainer.engine.events` for the events, what callbacks read and may ask).

Around the loop: the run's counters are ``self.state`` (:mod:`.state`), the config keys the trainer reads are
``self.options`` (:mod:`basetrainer.engine.options`), how the model is spread over devices is ``self.strategy``
(:mod:`basetrainer.parallel`), and what a checkpoint holds, where it goes and which one a run resumes from is
``self.checkpoints`` (:class:`~basetrainer.checkpoint.manager.CheckpointManager`).
"""
import contextlib
import time

import torch

from ..checkpoint.manager import CheckpointManager
from ..checkpoint.rng import set_rng_state
from ..data import loaders as data
from ..distributed import comm, watchdog
from ..fault_tolerance import start_replica_groups
from ..fault_tolerance.batches import group_batches
from ..fault_tolerance.replica_groups import left_after
from ..parallel.mesh import build_mesh
from ..utils.batch import batch_size, has_device_work, move_to_device, total_loss
from ..utils.log import get_logger
from ..utils.seeding import seed_everything
from . import evaluation
from .determinism import make_deterministic
from .events import CallbackList, Event
from .hooks import TrainerHooks
from .legacy import LegacyTrainerAttributes
from .loss_tally import LossTally
from .options import LoopOptions
from .outside_training import OutsideTraining
from .preemption import Preemption
from .profiling import Profiler, profile_dir
from .progress import ProgressBar
from .requests import TrainerRequests
from .state import RunState

logger = get_logger()


class EngineTrainer(TrainerHooks, TrainerRequests, OutsideTraining, LegacyTrainerAttributes):
    """The abstract trainer: subclass it and fill in the ``build_*`` hooks.

    ``__init__`` reads the loop options from ``cfg`` and sets ``device``, ``is_main_process``, ``world_size``,
    ``rank`` and ``local_rank``; ``build(cfg)`` calls the hooks in the order train loader, test loader, model,
    criterion, optimizer, callbacks, and fills ``num_batches`` (batches per epoch), ``num_samples``/``train_num``
    and ``test_num``. ``resume_settings`` are the config keys whose change makes a resumed run no exact
    continuation (it goes on, with a warning naming them); a task adds its own.

    A linear model on random data, two epochs of four batches::

        >>> import torch
        >>> from torch.utils.data import TensorDataset
        >>> from basetrainer import EngineTrainer
        >>> from basetrainer.config import Config
        >>> class Linear(EngineTrainer):
        ...     def __init__(self, cfg):
        ...         super().__init__(cfg)
        ...         self.build(cfg)
        ...     def build_train_loader(self, cfg):
        ...         data = TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,)))
        ...         return self.build_dataloader(data, batch_size=8)
        ...     def build_test_loader(self, cfg):
        ...         return None  # no evaluation
        ...     def build_model(self, cfg):
        ...         return torch.nn.Linear(4, 2)
        ...     def build_criterion(self, cfg):
        ...         return torch.nn.CrossEntropyLoss()
        ...     def build_optimizer(self, cfg):
        ...         return torch.optim.SGD(self.model.parameters(), lr=0.1)
        ...     def build_callbacks(self, cfg):
        ...         return []
        >>> trainer = Linear(Config(num_epochs=2, progress=False))
        >>> logs = trainer.run()
        >>> trainer.state.global_step, trainer.num_batches
        (8, 4)
    """

    resume_settings = ("num_epochs", "max_iters", "accumulate_grad_batches", "clip_grad_norm", "amp")

    def __init__(self, cfg):
        self.cfg = cfg
        self.world_size, self.rank, self.local_rank = comm.get_world_size(), comm.get_rank(), comm.get_local_rank()
        self.is_main_process = comm.is_main_process()
        options = LoopOptions.from_config(cfg)  # every key checked before anything is made
        self.device = comm.get_device(options.gpu_id)
        # fault_tolerance: this process's replica group (None without), and the group's own work_dir
        self.replica_groups, self.options = start_replica_groups(options, self.device, cfg)
        options = self.options
        self.mesh = build_mesh(options.mesh, self.device)  # before the loaders, which shard by data-parallel rank
        make_deterministic(options.deterministic)  # before CUDA does any work
        self.seed = options.seed
        seed_everything(self.seed)  # the same on every rank: identical initial weights
        # "skip" checks each optimizer step itself; "ignore" checks nothing, as a bare PyTorch loop
        tally = LossTally(check=self.options.nonfinite_loss == "raise")
        self.state = RunState(max_epochs=options.num_epochs, accumulate_grad_batches=options.accumulate_grad_batches,
                              loss_tally=tally)
        self.strategy = None  # chosen by build_model_parallel, or read off the model build_model returns
        self.model = self.optimizer = self.criterion = self.scaler = self.train_loader = self.test_loader = None
        self.callbacks = []
        self.num_samples = self.train_num = self.test_num = 0
        self.events = CallbackList([])
        self.checkpoints = CheckpointManager(options.resume, options.work_dir, sharded=options.sharded,
                                             asynchronous=options.async_checkpoint)
        self.preemption = Preemption(self.world_size, options.stop_check_every, options.slurm_requeue, self.device)
        self.watchdog = watchdog.Watchdog(options.watchdog_timeout, options.watchdog_factor, self.rank, self.world_size)
        self._moves_batches = self.device.type != "cpu" or self.options.channels_last

    # ------------------------------------------------------------------ the loop
    def run(self, logs=None):
        """Trains from the start (or the resumed position) for ``num_epochs`` epochs, or ``max_iters`` optimizer
        steps; returns ``logs``. The loaders' worker processes end with it, however it ends (a stop signal too)."""
        logs = {"train": {}, "test": {}, **(logs or {})}
        self.events = CallbackList(self.callbacks + self._builtin_callbacks(), trainer=self)
        state = self.state
        with self.preemption.watching(), data.workers_shut_down_after(self.train_loader, self.test_loader), \
                left_after(self.replica_groups):
            self.resume_or_seed()
            self.preemption.check_start_up()  # a stop signal while loaders, model or checkpoint loaded
            state.logs, state.stop_requested = logs, False
            state.lr = logs["lr"] = self.optimizer.param_groups[0]["lr"]
            logs["epoch"] = state.start_epoch
            try:
                self.events.fire(Event.TRAIN_BEGIN, logs)
                with self.watchdog.watching():  # a stalled or orphaned rank ends itself
                    self.train_epochs(logs)
                self.events.fire(Event.TRAIN_END, logs)
            except BaseException as error:  # callbacks flush and close, then the error goes on
                self.events.fire_exception(error, logs)
                self.checkpoints.wait(quietly=True)  # its own failure must not hide this error
                raise
            self.checkpoints.wait()  # a checkpoint still being written in the background
        return logs

    def train_epochs(self, logs):
        """The epochs: each one's batches, its evaluation, ``on_epoch_end`` and a stop check."""
        state = self.state
        for epoch in range(state.start_epoch, state.max_epochs):
            if (state.stop_requested or state.finished) and not state.evaluation_pending:
                break  # e.g. restored by a resumed EarlyStopping
            self.train_epoch(epoch, logs)
            if not self.options.eval_every_n_iters or self._last_steps_unevaluated():
                self._evaluate_during_training(logs, "end")  # at every epoch end, or after the last steps
            state.epoch_finished = True
            self.events.fire(Event.EPOCH_END, epoch, logs)
            if self.preemption.stop_due(state, epoch_end=True):
                self._stop_for_signal()

    def train_epoch(self, epoch, logs):
        """One epoch's batches, from where the run stands: for each, ``on_batch_begin``, ``train_step``,
        ``on_train_summary``, then its end (an evaluation when due, ``on_batch_end``, the stop check)."""
        state, events = self.state, self.events
        for batch, inputs in self._epoch_batches(epoch, logs):
            state.batch = batch
            self.watchdog.begin_batch()
            events.fire(Event.BATCH_BEGIN, batch, logs)
            inputs = self.to_device(inputs)
            outputs, losses = self.train_step(inputs)
            state.lr = logs["lr"] = self.optimizer.param_groups[0]["lr"]
            events.fire(Event.TRAIN_SUMMARY, inputs, outputs, losses, epoch, batch, logs)
            if self._end_batch(batch, logs):
                break
        state.batches_done_at = time.perf_counter()  # the epoch's speed (run summary): once here, not per batch
        state.start_batch = 0
        state.loss_tally.fold()

    def _epoch_batches(self, epoch, logs):
        """Starts ``epoch`` (``on_epoch_begin``) and returns its batches from where the run stands: all of
        them, or after a resume the rest of the interrupted epoch; after a resume from a stop during an
        evaluation, that evaluation comes first (the one before ``on_batch_end``: then that event too)."""
        state = self.state
        state.epoch = logs["epoch"] = epoch
        state.epoch_finished = False
        state.loss_tally.start_epoch(epoch, state.start_batch, self.device)
        self.events.fire(Event.EPOCH_BEGIN, epoch, logs)
        self.model.train()
        owed = state.evaluation_pending
        if owed == "end":
            batches = iter(())
        elif self.replica_groups is not None:  # this group's share of what the groups alive have not read yet
            batches = group_batches(self.replica_groups, self.train_loader, epoch)
        else:
            batches = data.iterate_from(self.train_loader, epoch, state.start_batch)
        self.checkpoints.restore_random_streams()  # after positioning the loader, so skipped batches draw nothing
        if owed == "batch" and self._end_batch(state.start_batch - 1, logs):
            return iter(())
        return enumerate(batches, start=state.start_batch)

    def _end_batch(self, batch, logs) -> bool:
        """The end of ``batch``: its evaluation when due, ``on_batch_end``, the stop check and
        the watchdog's heartbeat. Returns whether training ends here."""
        state = self.state
        state.batch = batch
        if self.options.eval_every_n_iters and self._evaluation_due():
            self._evaluate_during_training(logs, "batch")  # before on_batch_end, so checkpoints hold it
        self.events.fire(Event.BATCH_END, batch, logs)
        self.watchdog.beat()
        if self.preemption.stop_due(state):
            self._stop_for_signal()
        return state.stop_requested or state.finished

    def train_step(self, inputs):
        """One batch: forward and loss under autocast and backward (``run_step``, or a pipeline's schedule: see
        ``Strategy.forward_backward``), and the optimizer step at the end of each accumulation window. Returns
        ``(outputs, losses)``."""
        state = self.state
        step_now, window = state.accumulation_window(state.batch)
        state.accumulating = not step_now
        if step_now:  # the gradients are reduced in backward as usual
            outputs, losses = self.strategy.forward_backward(self.model, self._forward, inputs, window, self.scaler)
        else:  # inside an accumulation window they stay local until its last batch
            with self.strategy.no_gradient_sync(self.model):
                outputs, losses = self.strategy.forward_backward(self.model, self._forward, inputs, window, self.scaler)
        state.loss = total_loss(losses).detach()  # callbacks read this rather than each detaching the loss again
        size = batch_size(inputs)
        state.samples_seen += size
        state.loss_tally.add(state.loss, size)  # summed, and checked for NaN/inf, every few batches
        if step_now:
            self.optimizer_step()
        if state.loss_tally.pending >= self.options.nonfinite_check_every:
            state.loss_tally.fold()
        return outputs, losses

    def run_step(self, inputs):
        """Forward pass and loss for one batch; override for other batch layouts or losses.

        Returns ``(outputs, losses)``; ``losses`` may be a tensor, a list or a dict of tensors (their sum is
        what backward sees; callbacks see each term), or None in eval mode (a detector computes no loss there)."""
        data_, targets = inputs
        outputs = self.model(data_)
        losses = self.criterion(outputs, targets)
        return outputs, losses

    def optimizer_step(self):
        """Unscale, clip, check, step and clear the gradients; under ``fault_tolerance``, only a step every replica
        group alive completed (a dropped one is undone on every group and its batches read again)."""
        optimizer, scaler, options, groups = self.optimizer, self.scaler, self.options, self.replica_groups
        if groups is not None and not groups.step_agreed(self.model):
            return self._drop_step()
        if options.clip_grad_norm > 0 or options.nonfinite_loss == "skip":
            if not self._clip_and_check_gradients():
                return
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        self.state.global_step += 1
        if groups is not None:
            groups.after_step()  # DiLoCo: the outer step at the end of its period

    def _clip_and_check_gradients(self) -> bool:
        """Unscales and clips the gradients (``clip_grad_norm``); under ``nonfinite_loss: skip``,
        drops this step when its losses or gradients are not finite. Returns whether to step."""
        optimizer, scaler, state = self.optimizer, self.scaler, self.state
        if scaler is not None:
            scaler.unscale_(optimizer)
        max_norm = self.options.clip_grad_norm if self.options.clip_grad_norm > 0 else float("inf")
        grad_norm = self.strategy.clip_grad_norm(self.model, max_norm)
        if self.options.nonfinite_loss != "skip":
            return True
        if state.loss_tally.step_is_finite(grad_norm, self.device):
            state.loss_tally.fold()  # this step's losses, known finite
            return True
        self._drop_step()
        if scaler is not None:
            scaler.update()
        logger.warning("skipped the optimizer step at epoch %d, batch %d: non-finite loss or gradients",
                       state.epoch + 1, state.batch + 1)
        return False

    def _drop_step(self) -> None:
        """Leaves this step's gradients and losses out (counted in ``skipped_steps``)."""
        self.state.loss_tally.discard()
        self.optimizer.zero_grad(set_to_none=True)
        self.state.skipped_steps += 1

    def test_epoch(self, logs):
        """One evaluation over every test set (see :func:`basetrainer.engine.evaluation.evaluate`)."""
        evaluation.evaluate(evaluation.test_sets(self.test_loader), self.model, self._forward, self.events,
                            self.state, logs, to_device=self.to_device, watchdog=self.watchdog,
                            stop_after=self.preemption.evaluation_check, strategy=self.strategy)

    # ------------------------------------------------------------------ loop helpers
    def _forward(self, inputs):
        """``run_step`` under autocast (when ``amp`` is on) on a batch ``to_device`` moved (once; the events see it)."""
        if self.options.amp is None:
            return self.run_step(inputs)
        with self.autocast():
            return self.run_step(inputs)

    def _evaluate_during_training(self, logs, when: str) -> None:
        """An evaluation during training: ``when`` is "batch" (before ``on_batch_end``) or "end" (after the
        epoch's batches). A stop signal abandons it and the run saves and stops; the resumed run does it again."""
        try:
            self.test_epoch(logs)
        except evaluation.EvaluationStopped as stopped:
            self._stop_for_signal(evaluation_pending=when, rng=stopped.rng)
        self.state.evaluation_pending = None

    def _stop_for_signal(self, evaluation_pending=None, rng=None):
        """Saves the training state (unless the checkpoint holds it already) and raises TrainingInterrupted;
        ``evaluation_pending``: a stop during an evaluation during training, which the resumed run does again;
        ``rng``: the random streams as that evaluation found them."""
        state = self.state
        state.loss_tally.fold()
        if rng is not None:
            set_rng_state(rng)
        state.evaluation_pending = evaluation_pending
        with self.watchdog.phase("save"):
            where = self.checkpoints.save_for_stop()
        during = "during evaluation " if evaluation_pending else ""
        self.preemption.interrupt(f"{during}at epoch {state.epoch + 1}, batch {state.batch + 1} ({where})")

    def _evaluation_due(self) -> bool:
        every, step = self.options.eval_every_n_iters, self.state.global_step
        return bool(every) and not self.state.accumulating and step % every == 0 and step != self.state.last_eval_step

    def _last_steps_unevaluated(self) -> bool:
        """Whether training ended (all steps taken, or a stop asked) after steps no evaluation saw: with
        ``eval_every_n_iters``, one more evaluation at the end."""
        state = self.state
        ending = state.finished or state.stop_requested or state.epoch + 1 >= state.max_epochs
        return ending and state.last_eval_step != state.global_step

    def to_device(self, inputs):
        """Where batches reach the device: moved (channels-last if asked), then the loader's device work done there."""
        moves = self._moves_batches or has_device_work(inputs)
        return move_to_device(inputs, self.device, self.options.channels_last) if moves else inputs

    def autocast(self):
        """Autocast to the ``amp`` dtype around a forward pass (nothing when ``amp`` is off)."""
        amp = self.options.amp
        return contextlib.nullcontext() if amp is None else torch.autocast(device_type=self.device.type, dtype=amp)

    def _builtin_callbacks(self):
        builtins = [cb for cb in (ProgressBar() if self.options.progress else None, self.thread_count) if cb]
        if self.options.profile_steps:
            builtins.append(Profiler(self.options.profile_steps, profile_dir(self.options.work_dir)))
        return builtins
