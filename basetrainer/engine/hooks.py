"""What a user's trainer fills in: the six ``build_*`` hooks, and ``build``, which calls them in order."""
import os

import torch

from ..data import loaders as data
from ..distributed.threads import CoreUse, set_process_threads
from ..errors import ConfigError, DataError
from ..parallel import select_strategy, strategy_of
from . import evaluation
from .added_callbacks import added_callbacks
from .lr_scaling import LRScaling
from .run_summary import RunSummary
from .target import time_to_target
from .threads import ThreadCount


class TrainerHooks:
    """The set-up half of :class:`~basetrainer.engine.trainer.EngineTrainer`.

    A subclass overrides the six hooks and calls ``self.build(cfg)`` at the end of its
    ``__init__``; ``build_dataloader`` and ``build_model_parallel`` are the helpers the
    hooks usually call. Around the hooks, ``build`` scales the optimizer's lr (``lr_scaling``, see
    :mod:`.lr_scaling`) before the callbacks are built, and adds after them the callback that records the time
    to ``target`` (:mod:`.target`) and the one that writes the run's summary (:mod:`.run_summary`).
    """

    lr_scaling = None  # with lr_scaling, an LRScaling once build() has made the optimizer
    threads, threads_reason = None, ""  # torch's intra-op threads in this process once build() set them, and why
    thread_count = None  # the ThreadCount that keeps them to the free cores while training (engine/threads.py)

    def build_train_loader(self, cfg, **kwargs):
        """Returns the training DataLoader, usually ``self.build_dataloader(dataset, batch_size,
        phase="train")``: sharded by global rank, reshuffled every epoch, resumable mid-epoch."""
        raise NotImplementedError("build_train_loader: return the training DataLoader")

    def build_test_loader(self, cfg, **kwargs):
        """Returns the evaluation DataLoader, or None to train without evaluating."""
        raise NotImplementedError("build_test_loader: return the evaluation DataLoader, or None")

    def build_model(self, cfg, **kwargs):
        """Returns the model, usually ``self.build_model_parallel(model)``, which places it on
        this process's device and wraps it for the parallel strategy. A model returned without
        that is placed and wrapped by ``build`` itself (one the hook wrapped in DDP,
        DataParallel or FSDP itself is kept as it is)."""
        raise NotImplementedError("build_model: return the model (usually via self.build_model_parallel)")

    def build_criterion(self, cfg, **kwargs):
        """Returns the loss function that ``run_step`` applies to ``(outputs, targets)``."""
        raise NotImplementedError("build_criterion: return the loss function")

    def build_optimizer(self, cfg, **kwargs):
        """Returns the optimizer. It is built after the model, so ``self.model.parameters()``
        are the parameters as the strategy placed (and, for pruning, reshaped) them."""
        raise NotImplementedError("build_optimizer: return the optimizer")

    def build_callbacks(self, cfg, **kwargs):
        """Returns the list of callbacks (None entries are dropped). Built last, so a callback
        may take ``self.optimizer`` (LR schedules) or ``self.num_batches``."""
        raise NotImplementedError("build_callbacks: return a list of callbacks (may be empty)")

    def build(self, cfg, **kwargs):
        """Calls the six hooks with ``cfg`` and ``kwargs``, in the order train loader, test loader, model,
        criterion, optimizer, callbacks, and fills what the loop reads: ``num_batches`` and the sample counts,
        the parallel strategy (the model placed and wrapped when the hook did not), the lr scaling, the time to
        ``target``'s callback, the run summary's and, under ``amp: fp16``, the gradient scaler. Call it once, at the end of your
        ``__init__``; a refusal (a ConfigError or DataError) comes from here, before training starts. Last, the
        process's threads: the cores other work left free while it built (:mod:`basetrainer.distributed.threads`)."""
        core_use = CoreUse()  # what the rest of the machine keeps busy while this builds
        self.train_loader = self.build_train_loader(cfg, **kwargs)
        self.test_loader = self.build_test_loader(cfg, **kwargs)
        if self.train_loader is not None:
            self._plan_training(self.train_loader)
        self.test_num = sum(data.num_samples(loader) for _, loader in evaluation.test_sets(self.test_loader))
        self.model = self.build_model(cfg, **kwargs)
        if self.strategy is None:  # the hook did not call build_model_parallel
            self.strategy = strategy_of(self.model, self.device, self.options.compile, self.options.communication)
            if self.strategy is None:
                self.model = self.build_model_parallel(self.model)
            elif self.mesh is not None:  # its loaders shard by the mesh's data-parallel rank: the model must too
                raise ConfigError(f"build_model returned a {type(self.model).__name__} and parallel.mesh is set: "
                                  f"return the model unwrapped (self.build_model_parallel(model) applies the mesh)")
            else:  # wrapped by the hook itself (DDP, DataParallel, FSDP)
                self.model = self.strategy.adopt(self.model)
        self.criterion = self.build_criterion(cfg, **kwargs)
        self.strategy.prepare_for_optimizer(self.model)
        self.optimizer = self.build_optimizer(cfg, **kwargs)
        self.strategy.check_optimizer(self.model, self.optimizer)  # FSDP: it must hold the sharded parameters
        self.strategy.attach_optimizer(self.optimizer)  # DDP's local SGD: averaging after the steps
        if self.replica_groups is not None:  # DiLoCo's outer optimizer
            self.replica_groups.prepare(self.model, self.strategy)
        if self.options.lr_scaling.enabled and self.optimizer is not None:  # before the callbacks: schedules and
            self.lr_scaling = LRScaling(self.options.lr_scaling, self.optimizer, self.train_loader, self.state)
            self.lr_scaling.apply()  # warm-up start from the scaled rate
        self.callbacks = [cb for cb in (self.build_callbacks(cfg, **kwargs) or []) if cb]
        self.callbacks += added_callbacks()  # a driver's, after the trainer's own (Ray Train's reporter)
        # the engine's own, among the callbacks so that what they recorded travels in checkpoints
        work_dir = self.options.work_dir
        self.callbacks.append(RunSummary(os.path.join(work_dir, "log") if work_dir else None))
        if self.options.target is not None:
            set_names = [name for name, _ in evaluation.test_sets(self.test_loader)]
            self.callbacks.append(time_to_target(self.options.target, self.callbacks, set_names, self.options.work_dir))
        if self.options.amp == torch.float16:
            self.scaler = torch.amp.GradScaler(self.device.type)
        if self.strategy.pipeline is not None and type(self).run_step.__qualname__ != "EngineTrainer.run_step":
            raise ConfigError(f"{type(self).__name__} overrides run_step, and a pipeline (parallel.mesh.pp > 1) runs "
                              f"the model stage by stage with the criterion on the last stage: give the loss as "
                              f"build_criterion's criterion(outputs, targets), or set parallel.mesh.pp: 1")
        self.strategy.attach_loss(self.criterion, self.autocast)  # a pipeline's last stage computes the loss
        adapt = not self.options.deterministic  # float sums depend on the number of threads
        self.threads, self.threads_reason = set_process_threads(core_use, adapt)
        # looked at again while it trains (a callback the trainer adds itself, as the progress bar)
        self.thread_count = ThreadCount(self.threads) if adapt and self.threads_reason != "OMP_NUM_THREADS" else None

    def _plan_training(self, loader):
        """How long the run is: ``num_epochs`` epochs, or the epochs ``max_iters`` steps take."""
        state, options = self.state, self.options
        if self.replica_groups is not None:  # they deal the data: an epoch's batches while every group is alive
            state.batches_per_epoch = self.replica_groups.planned_batches(loader)
        else:
            state.batches_per_epoch = data.num_batches(loader)
        self.num_samples = self.train_num = data.num_samples(loader)
        if state.batches_per_epoch == 0 and data.has_length(loader):
            raise DataError("the training loader yields no batch: add data, or lower batch_size")
        if options.max_iters is None:
            if not data.has_length(loader):
                raise DataError("the training loader has no length (an endless stream or an iterable dataset): "
                                "set max_iters to train for a number of steps")
            return
        state.max_steps = options.max_iters
        steps_per_epoch = -(-state.batches_per_epoch // options.accumulate_grad_batches)
        state.max_epochs = -(-options.max_iters // steps_per_epoch) if steps_per_epoch else 1

    def build_dataloader(self, dataset, batch_size, num_workers=0, shuffle=True, phase="train",
                         distributed=None, **kwargs):
        """A DataLoader sharded by data-parallel rank (see :func:`basetrainer.data.loaders.build_dataloader`). The
        layout is the process group's, however the processes were started; ``distributed`` is kept for old
        scripts and changes nothing."""
        kwargs.setdefault("seed", self.seed)
        return data.build_dataloader(dataset, batch_size, num_workers, shuffle=shuffle, phase=phase, **kwargs)

    def build_model_parallel(self, model, device_ids=None, distributed=None, **kwargs):
        """Moves the model to this process's device and wraps it as the parallel strategy needs
        (DDP or FSDP as ``strategy`` says, DataParallel or nothing; see :func:`~basetrainer.parallel.select_strategy`).
        ``kwargs`` may override ``sync_bn``, ``find_unused_parameters`` and ``broadcast_buffers``;
        ``distributed`` is kept for old scripts and changes nothing: several processes always mean DDP or FSDP."""
        self.strategy = select_strategy(self.options, self.device, device_ids, mesh=self.mesh,
                                        plan=lambda model: self.build_parallel_plan(model, self.mesh.shape.tp),
                                        pipeline=self.options.pipeline, **kwargs)
        return self.strategy.wrap(model)

    def build_parallel_plan(self, model, tp_size: int):
        """The tensor-parallel plan for ``model`` under ``parallel.mesh`` with ``tp`` > 1: ``{module-name pattern:
        style}`` (see :mod:`basetrainer.parallel.tensor_parallel`). By default the config's
        ``parallel.tensor_parallel.plan``, else the model's own ``tensor_parallel_plan(tp_size)``, else None."""
        if self.options.tensor_parallel_plan:
            return self.options.tensor_parallel_plan
        own = getattr(model, "tensor_parallel_plan", None)
        return own(tp_size) if callable(own) else None

