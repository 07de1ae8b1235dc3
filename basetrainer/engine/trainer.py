"""EngineTrainer: the training loop.

A user subclass fills in six ``build_*`` hooks and calls ``self.build(cfg)``; ``run()``
then trains. The loop reads top to bottom: ``run`` -> ``train_epoch`` -> ``train_step`` ->
``optimizer_step``, and ``test_epoch``. Where a user would change behaviour:

- a custom forward or loss, or another batch layout: override ``run_step`` (it returns
  ``outputs, losses``; batches reach it already on the device);
- observing or steering training (metrics, logging, LR, checkpoints): a ``Callback``
  (see :mod:`basetrainer.engine.events` for the events, what callbacks read and may ask).

Around the loop: the run's counters are ``self.state`` (:mod:`.state`), the config keys
the trainer reads are ``self.options`` (:mod:`.options`), how the model is spread over
devices is ``self.strategy`` (:mod:`.strategies`), and the full training state that
checkpoints hold is written and read in :mod:`.resume`.
"""
import contextlib

import torch

from ..checkpoint import sharded as sharded_checkpoint
from ..data import loaders as data
from ..distributed import comm, watchdog
from ..utils.batch import batch_size, move_to_device, total_loss
from ..utils.log import get_logger
from ..utils.seeding import seed_everything
from . import evaluation, resume
from .determinism import make_deterministic
from .events import CallbackList, Event
from .hooks import TrainerHooks
from .legacy import LegacyTrainerAttributes
from .loss_tally import LossTally
from .options import LoopOptions, option
from .preemption import Preemption
from .profiling import Profiler, profile_dir
from .progress import ProgressBar
from .state import RunState

logger = get_logger()


class EngineTrainer(TrainerHooks, LegacyTrainerAttributes):
    """The abstract trainer: subclass it and fill in the ``build_*`` hooks.

    ``__init__`` reads the loop options from ``cfg`` and sets ``device``,
    ``is_main_process``, ``world_size``, ``rank`` and ``local_rank``; ``build(cfg)`` calls
    the hooks in the order train loader, test loader, model, criterion, optimizer,
    callbacks, and fills ``num_batches`` (batches per epoch), ``num_samples``/``train_num``
    and ``test_num``.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        self.world_size, self.rank, self.local_rank = comm.get_world_size(), comm.get_rank(), comm.get_local_rank()
        self.is_main_process = comm.is_main_process()
        self.device = comm.get_device(option(cfg, "gpu_id", None))
        self.options = options = LoopOptions.from_config(cfg, self.device)
        make_deterministic(options.deterministic)  # before CUDA does any work
        self.seed = options.seed
        seed_everything(self.seed)  # the same on every rank: identical initial weights
        # "skip" checks each optimizer step itself; "ignore" checks nothing, as a bare PyTorch loop
        tally = LossTally(check=self.options.nonfinite_loss == "raise")
        self.state = RunState(max_epochs=self.options.num_epochs, loss_tally=tally)
        self.strategy = None  # chosen by build_model_parallel, or read off the model build_model returns
        self.model = self.optimizer = self.criterion = self.scaler = None
        self.train_loader = self.test_loader = None
        self.callbacks = []
        self.num_samples = self.train_num = self.test_num = 0
        self.events = CallbackList([])
        self.pending_restore = None  # RNG and loss sums of a resumed run, restored once the loader is positioned
        self.checkpoint_path = None  # where a stop signal saves (set by a checkpoint callback)
        self.saved_position = None  # where the training state last saved there resumes (resume.position)
        self.sharded_checkpointer = sharded_checkpoint.ShardedCheckpointer(asynchronous=self.options.async_checkpoint)
        self._export_weights = None
        self.preemption = Preemption(self, self.world_size, options.stop_check_every, options.slurm_requeue)
        self.watchdog = watchdog.Watchdog(options.watchdog_timeout, options.watchdog_factor, self.rank, self.world_size)
        self._moves_batches = self.device.type != "cpu" or self.options.channels_last

    # ------------------------------------------------------------------ the loop
    def run(self, logs=None):
        """Trains from the start (or the resumed position) for ``max_epochs`` epochs or
        ``max_steps`` optimizer steps; returns ``logs``."""
        logs = {"train": {}, "test": {}, **(logs or {})}
        self.events = CallbackList(self.callbacks + self._builtin_callbacks(), trainer=self)
        state = self.state
        with self.preemption.watching():
            self.resume_or_seed()
            self.preemption.check_start_up(self)  # a stop signal while loaders, model or checkpoint loaded
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
                self.sharded_checkpointer.wait(quietly=True)  # its own failure must not hide this error
                raise
            self.sharded_checkpointer.wait()  # a checkpoint still being written in the background
        return logs

    def train_epochs(self, logs):
        """The epochs: each one's batches, its evaluation, ``on_epoch_end`` and a stop check."""
        state = self.state
        for epoch in range(state.start_epoch, state.max_epochs):
            if (state.stop_requested or state.finished) and not state.evaluation_pending:
                break  # e.g. restored by a resumed EarlyStopping
            self.train_epoch(epoch, logs)
            if not self.options.eval_every_n_iters or self._last_steps_unevaluated():
                evaluation.during_training(self, logs, "end")  # at every epoch end, or after the last steps
            state.epoch_finished = True
            self.events.fire(Event.EPOCH_END, epoch, logs)
            self.preemption.check(self, epoch_end=True)

    def train_epoch(self, epoch, logs):
        state, events = self.state, self.events
        state.epoch = logs["epoch"] = epoch
        state.epoch_finished = False
        resume.start_epoch_tally(self)  # the interrupted epoch's sums after a mid-epoch resume
        events.fire(Event.EPOCH_BEGIN, epoch, logs)
        self.model.train()
        owed = state.evaluation_pending  # a stop abandoned an evaluation: the resumed run does it first
        batches = iter(()) if owed == "end" else data.iterate_from(self.train_loader, epoch, state.start_batch)
        resume.restore_rng(self)  # after positioning the loader, so skipped batches draw nothing
        if owed == "batch" and self._end_batch(state.start_batch - 1, logs):
            batches = iter(())
        for batch, inputs in enumerate(batches, start=state.start_batch):
            state.batch = batch
            self.watchdog.begin_batch()
            events.fire(Event.BATCH_BEGIN, batch, logs)
            inputs = self.to_device(inputs)
            outputs, losses = self.train_step(inputs)
            state.lr = logs["lr"] = self.optimizer.param_groups[0]["lr"]
            events.fire(Event.TRAIN_SUMMARY, inputs, outputs, losses, epoch, batch, logs)
            if self._end_batch(batch, logs):
                break
        state.start_batch = 0
        state.loss_tally.fold()

    def _end_batch(self, batch, logs) -> bool:
        """The end of ``batch``: its evaluation when due, ``on_batch_end``, the stop check and
        the watchdog's heartbeat. Returns whether training ends here."""
        state = self.state
        state.batch = batch
        if self._evaluation_due():
            evaluation.during_training(self, logs, "batch")  # before on_batch_end, so checkpoints hold it
        self.events.fire(Event.BATCH_END, batch, logs)
        self.watchdog.beat()
        self.preemption.check(self)
        return state.stop_requested or state.finished

    def train_step(self, inputs):
        """One batch: forward and loss under autocast, backward, and the optimizer step
        at the end of each accumulation window. Returns ``run_step``'s ``(outputs, losses)``."""
        state = self.state
        step_now, window = self._accumulation_window(state.batch)
        state.accumulating = not step_now
        with self._gradient_sync(step_now):
            with self.autocast():
                outputs, losses = self.run_step(inputs)
            loss = total_loss(losses)
            state.loss = loss.detach()  # callbacks read this rather than each detaching the loss again
            size = batch_size(inputs)
            state.samples_seen += size
            state.loss_tally.add(state.loss, size)  # summed, and checked for NaN/inf, every few batches
            if window > 1:
                loss = loss / window
            (loss if self.scaler is None else self.scaler.scale(loss)).backward()
        if step_now:
            self.optimizer_step()
        if state.loss_tally.pending >= self.options.nonfinite_check_every:
            state.loss_tally.fold()
        return outputs, losses

    def run_step(self, inputs):
        """Forward pass and loss for one batch; override for other batch layouts or losses.

        Returns ``(outputs, losses)``; ``losses`` may be a tensor, a list or a dict of
        tensors (their sum is what backward sees; callbacks see each term).
        """
        data_, targets = inputs
        outputs = self.model(data_)
        losses = self.criterion(outputs, targets)
        return outputs, losses

    def optimizer_step(self):
        """Unscale, clip, check, step and clear the gradients."""
        optimizer, scaler, options = self.optimizer, self.scaler, self.options
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
        if self._step_is_finite(grad_norm):
            state.loss_tally.fold()  # this step's losses, known finite
            return True
        state.loss_tally.discard()
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.update()
        state.skipped_steps += 1
        logger.warning("skipped the optimizer step at epoch %d, batch %d: non-finite loss or gradients",
                       state.epoch + 1, state.batch + 1)
        return False

    def test_epoch(self, logs):
        """One evaluation over every test set (see :func:`basetrainer.engine.evaluation.evaluate`)."""
        evaluation.evaluate(self, logs)

    def evaluate(self, logs=None):
        """Runs only the evaluation loop with the callbacks; returns ``logs["test"]``."""
        logs = {"train": {}, "test": {}, **(logs or {})}
        self.events = CallbackList(self.callbacks, trainer=self)
        try:
            self.test_epoch(logs)
        except evaluation.EvaluationStopped:
            self.preemption.interrupt(self, "during an evaluation outside training (nothing to save)")
        return logs["test"]

    def predict(self, loader):
        """The model's outputs (``predict_step``) for every sample of ``loader``, in dataset order,
        gathered to every rank without the duplicates a padding sampler adds."""
        return evaluation.predict(self, loader)

    def predict_step(self, inputs):
        """The outputs for one batch; override for other batch layouts. By default the model
        applied to the batch, or to its first item when it is a tuple or list (``(images, targets)``)."""
        return self.model(inputs[0] if isinstance(inputs, (tuple, list)) else inputs)

    # ------------------------------------------------------------------ loop helpers
    def _accumulation_window(self, batch):
        """(whether ``batch`` ends its accumulation window, that window's size).

        The last window of an epoch may be shorter, and is divided by its own size so
        that every optimizer step averages over the batches it saw.
        """
        n, per_epoch = self.options.accumulate_grad_batches, self.num_batches
        if n == 1:
            return True, 1
        full = (per_epoch // n) * n if per_epoch else None
        size = n if full is None or batch < full else per_epoch - full
        return (batch % n) + 1 == size, size

    def _gradient_sync(self, sync: bool):
        """Inside an accumulation window the gradients stay local until its last batch."""
        return contextlib.nullcontext() if sync else self.strategy.no_gradient_sync(self.model)

    def _evaluation_due(self) -> bool:
        every, step = self.options.eval_every_n_iters, self.state.global_step
        return bool(every) and not self.state.accumulating and step % every == 0 and step != self.state.last_eval_step

    def _last_steps_unevaluated(self) -> bool:
        """Whether training has ended (all steps taken, or a stop asked) after steps that no
        evaluation saw: ``eval_every_n_iters`` then evaluates once more, at the end."""
        state = self.state
        ending = state.finished or state.stop_requested or state.epoch + 1 >= state.max_epochs
        return ending and state.last_eval_step != state.global_step

    def to_device(self, inputs):
        """The batch on this process's device (channels-last when asked); on the CPU, as it is."""
        return move_to_device(inputs, self.device, self.options.channels_last) if self._moves_batches else inputs

    def autocast(self):
        """Autocast to the ``amp`` dtype around a forward pass (nothing when ``amp`` is off)."""
        if self.options.amp is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.options.amp)

    def _step_is_finite(self, grad_norm) -> bool:
        flag = torch.isfinite(grad_norm.float())
        losses_finite = self.state.loss_tally.pending_finite()
        if losses_finite is not None:
            flag = flag & losses_finite
        bad = (~flag).to(torch.int32).reshape(1)
        return not bool(comm.all_reduce_max(bad.to(self.device))[0])  # every rank takes the same decision

    def _builtin_callbacks(self):
        builtins = [ProgressBar()] if self.options.progress else []
        if self.options.profile_steps:
            builtins.append(Profiler(self.options.profile_steps, profile_dir(self.options.work_dir)))
        return builtins

    # ------------------------------------------------------------------ what callbacks may ask
    def request_stop(self) -> None:
        """Ends training after the current batch; the epoch's evaluation and end events still run."""
        self.state.stop_requested = True

    def save_checkpoint(self, path=None) -> str:
        """Writes the full training state to ``path`` (default: the checkpoint path set by
        :meth:`set_checkpoint_path`). Every rank calls it; the main process writes, atomically,
        keeping the file it replaces as the previous one (see :func:`resume.save_training_state`)."""
        with self.watchdog.phase("save"):
            return resume.save_training_state(self, path or self.checkpoint_path)

    def set_checkpoint_path(self, path) -> None:
        """Where a stop signal saves the training state, and where ``resume: auto`` looks first."""
        self.checkpoint_path = path

    def export_weights(self) -> dict:
        """The weights to ship: those of the provider set with :meth:`set_export_weights`
        (an EMA's average), else the model's; CPU tensors, keys without wrapper prefixes."""
        if self._export_weights is not None:
            return self._export_weights()
        return self.strategy.model_state_dict(self.model)

    def set_export_weights(self, provider) -> None:
        self._export_weights = provider

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """The whole training state (see :func:`basetrainer.engine.resume.training_state`)."""
        return resume.training_state(self)

    def load_state_dict(self, state: dict, name: str = "the checkpoint") -> None:
        resume.load_training_state(self, state, name)

    def resume_or_seed(self):
        """Loads the checkpoint ``cfg.resume`` names ("auto": the newest last.pth), else seeds per rank."""
        resume.resume_or_seed(self)

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

