"""The trainer's own config keys, read and checked in one place: :class:`~basetrainer.engine.options.LoopOptions`.

What each key accepts and its default are declared once, in :mod:`basetrainer.engine.settings`.
"""
from dataclasses import dataclass
from typing import Optional

import torch

from ..distributed import comm
from ..errors import ConfigError
from ..fault_tolerance.options import FaultTolerance
from ..parallel.communication import Communication
from ..parallel.mesh import MeshShape
from ..parallel.plans import PipelinePlan
from .lr_scaling import LRScalingRule
from .settings import LOOP_SETTINGS, PIPELINE
from .target import Target

_AMP_DTYPES = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}
PROFILE_STEPS = (1, 1, 3)  # what ``profile: true`` traces: wait, warmup, active batches


@dataclass(frozen=True)
class LoopOptions:
    """What the trainer reads from the config; every other key belongs to the user's hooks.

    A run is ``num_epochs`` epochs, or exactly ``max_iters`` optimizer steps (epochs then run
    as far as needed, the last one partial); ``eval_every_n_iters`` evaluates every that
    many steps and at the end instead of at epoch ends (0). ``amp`` is the autocast dtype
    (None: full precision); ``nonfinite_loss`` is what a NaN or infinite loss does:
    ``raise`` (stop, naming the batch), ``skip`` (drop that optimizer step) or ``ignore``
    (no check, as in a bare PyTorch loop).

    Under several processes ``strategy`` is ``ddp`` (whole model per rank) or ``fsdp``
    (parameters, gradients and optimizer state sharded; ``fsdp_*`` tune it, see
    :mod:`basetrainer.parallel.fsdp`); ``activation_checkpointing`` names module classes that
    recompute their activations in backward (any strategy); ``async_checkpoint`` writes
    checkpoints in the background (sharded directories, see :mod:`basetrainer.checkpoint.sharded`).

    ``profile_steps`` is ``(wait, warmup, active)``: training batches skipped, traced and
    thrown away, then traced with ``torch.profiler`` into ``<work_dir>/log/profile`` (without
    a work_dir, ``log/profile`` in the current folder; see :mod:`.profiling`). ``profile: true``
    alone means ``(1, 1, 3)``; None: no profiler at all.

    Faults: ``slurm_requeue`` requeues a SLURM job stopped by SIGUSR1 (:mod:`.preemption`);
    ``watchdog_timeout`` (seconds; 0: off) and ``watchdog_factor`` bound how long a step may
    take before the rank ends itself (:mod:`basetrainer.distributed.watchdog`); ``deterministic`` (True, or "warn":
    warn where an operation has no deterministic version instead of raising) asks torch for
    deterministic algorithms (:mod:`.determinism`).

    ``target`` (a :class:`~.target.Target`, or None) is the evaluation result whose first reach the run records
    (:mod:`.target`); ``lr_scaling`` (an :class:`~.lr_scaling.LRScalingRule`) how the optimizer's lr follows the
    global batch (:mod:`.lr_scaling`).

    Every field is read from the config key of its name (:mod:`basetrainer.engine.settings` declares what each
    accepts, its default and unit); ``profile`` is read into ``profile_steps``; ``local_sgd``,
    ``grad_compression`` and ``powersgd`` into ``communication``, what DDP's replicas send
    (:mod:`basetrainer.parallel.communication`); ``parallel`` into ``mesh`` (a
    :class:`~basetrainer.parallel.mesh.MeshShape`, or None), ``tensor_parallel_plan`` and ``pipeline`` (a
    :class:`~basetrainer.parallel.plans.PipelinePlan`, or None without ``pp``).
    """

    num_epochs: int
    max_iters: Optional[int]
    eval_every_n_iters: int
    progress: object  # "auto" (bars on a terminal, lines in a file), True (bars) or False (nothing)
    seed: int
    gpu_id: object
    amp: Optional[torch.dtype]
    accumulate_grad_batches: int
    clip_grad_norm: float
    channels_last: bool
    compile: bool
    nonfinite_loss: str
    nonfinite_check_every: int
    stop_check_every: int
    sync_bn: bool
    find_unused_parameters: bool
    broadcast_buffers: bool
    strategy: str
    fsdp_shard: tuple
    fsdp_reshard_after_forward: bool
    fsdp_cpu_offload: bool
    activation_checkpointing: tuple
    async_checkpoint: bool
    communication: Communication
    fault_tolerance: FaultTolerance
    mesh: Optional[MeshShape]
    tensor_parallel_plan: Optional[dict]
    pipeline: Optional[PipelinePlan]
    resume: Optional[str]
    work_dir: Optional[str]
    profile_steps: Optional[tuple]
    slurm_requeue: bool
    watchdog_timeout: float
    watchdog_factor: float
    deterministic: object
    target: Optional[Target]
    lr_scaling: LRScalingRule

    @property
    def sharded(self) -> bool:
        """Whether the model and the optimizer state are sharded over processes (FSDP, or a device mesh), so that
        checkpoints are directories of shards."""
        return self.strategy == "fsdp" or self.mesh is not None

    @classmethod
    def from_config(cls, cfg, device: Optional[torch.device] = None) -> "LoopOptions":
        """Reads the keys from ``cfg`` (a dict, a Config or an argparse.Namespace); missing or None keys take
        their defaults, keys the loop does not read are left alone. A value a key does not accept is a
        one-line ConfigError naming the key, the value and what it accepts. ``device`` (default: the one
        ``gpu_id`` names) decides what ``amp: true`` means."""
        values = LOOP_SETTINGS.read(cfg, source="in the trainer's config")
        device = device or comm.get_device(values["gpu_id"])
        if values["max_iters"] is not None and _given(cfg, "num_epochs"):
            raise ConfigError(f"num_epochs ({values['num_epochs']}) and max_iters ({values['max_iters']}) are both "
                              f"set (in the trainer's config): a run is one or the other; set num_epochs: null to "
                              f"train for max_iters")
        profile = values.pop("profile")
        local_sgd = values.pop("local_sgd")
        fault_tolerance = FaultTolerance.from_settings(values.pop("fault_tolerance"), local_sgd)
        if fault_tolerance.diloco:  # across the replica groups, not between DDP's processes
            local_sgd = {**local_sgd, "period": 0}
        communication = _communication(local_sgd, values.pop("grad_compression"),
                                       values.pop("powersgd"), values["strategy"], _amp_dtype(values["amp"], device))
        parallel = values.pop("parallel")
        mesh = _mesh(parallel, communication)
        _check_fault_tolerance(fault_tolerance, mesh, values["strategy"], communication,
                               values["accumulate_grad_batches"])
        return cls(**{
            **values,
            "amp": _amp_dtype(values["amp"], device),
            "fsdp_shard": tuple(values["fsdp_shard"]),
            "activation_checkpointing": tuple(values["activation_checkpointing"]),
            "resume": None if values["resume"] in (False, "", "none", "None") else values["resume"],
            "profile_steps": _profile_steps(values["profile_steps"], profile),
            "watchdog_timeout": float(values["watchdog_timeout"]),
            "watchdog_factor": float(values["watchdog_factor"]),
            "clip_grad_norm": float(values["clip_grad_norm"]),
            "communication": communication,
            "fault_tolerance": fault_tolerance,
            "mesh": mesh,
            "tensor_parallel_plan": parallel["tensor_parallel"]["plan"],
            "pipeline": _pipeline(parallel, mesh, _amp_dtype(values["amp"], device)),
            "target": Target.from_setting(values["target"]),
            "lr_scaling": LRScalingRule.from_setting(values["lr_scaling"]),
        })


def _given(cfg, key) -> bool:
    value = cfg.get(key) if isinstance(cfg, dict) else getattr(cfg, key, None)
    return value is not None


def _communication(local_sgd: dict, compression: str, powersgd: dict, strategy: str, amp) -> Communication:
    """What DDP's replicas send (:mod:`basetrainer.parallel.communication`); the combinations that cannot
    work are refused here, before anything is built (one process: in ``select_strategy``, which knows the
    processes)."""
    communication = Communication(local_sgd["period"], local_sgd["warmup_steps"], compression, powersgd["rank"],
                                   powersgd["start_step"])
    if communication.local_sgd_period and compression != "none":
        raise ConfigError(f"local_sgd and grad_compression: {compression} are alternatives (after its warm-up, local "
                          f"SGD sends no gradients): set grad_compression: none, or local_sgd.period: 0")
    if communication.enabled and strategy != "ddp":
        raise ConfigError("local_sgd and grad_compression apply to strategy ddp (fsdp reduces its gradient shards "
                          "itself): set strategy: ddp, or local_sgd.period: 0 and grad_compression: none")
    if communication.local_sgd_period and amp == torch.float16:
        raise ConfigError("local_sgd with amp: fp16: each replica's gradient scaler would skip steps on its own and "
                          "the replicas would stop averaging together; use amp: bf16 or none")
    return communication


def _check_fault_tolerance(fault_tolerance: FaultTolerance, mesh: Optional[MeshShape], strategy: str,
                           communication: Communication, accumulation: int) -> None:
    """What cannot go with replica groups, refused before anything is built."""
    if not fault_tolerance.enabled:
        return
    if mesh is not None and (mesh.tp != 1 or mesh.pp != 1):
        raise ConfigError("fault_tolerance with tensor or pipeline parallel (parallel.mesh tp or pp): the groups "
                          "average whole replicas; remove parallel.mesh (DDP inside each group), or set "
                          "fault_tolerance.replica_groups: 0")
    if strategy == "fsdp" or mesh is not None:
        raise ConfigError("fault_tolerance with strategy fsdp (or parallel.mesh): a group hands a restarted one its "
                          "state rank by rank, and a sharded model's state is gathered over its ranks; use strategy: "
                          "ddp inside each replica group, or fault_tolerance.replica_groups: 0")
    if communication.enabled:
        raise ConfigError(f"fault_tolerance with grad_compression: {communication.grad_compression}: the groups "
                          f"average full gradients through torchft; set grad_compression: none")
    if accumulation > 1:
        raise ConfigError(f"fault_tolerance with accumulate_grad_batches {accumulation}: an epoch's length follows "
                          f"the groups alive, so accumulation windows would not line up; set "
                          f"accumulate_grad_batches: 1 and a larger batch_size")


def _mesh(parallel: dict, communication: Communication) -> Optional[MeshShape]:
    """The device mesh ``parallel.mesh`` asks for (:mod:`basetrainer.parallel.mesh`; fitted to the processes when
    the trainer builds it), or None; what cannot go with a mesh is refused here."""
    sizes, plan = parallel["mesh"], parallel["tensor_parallel"]["plan"]
    if sizes is None:
        if plan:
            raise ConfigError("parallel.tensor_parallel.plan is set and parallel.mesh is not: set parallel.mesh "
                              "(e.g. {tp: 2, dp_shard: -1}), or remove the plan")
        return None
    if communication.enabled:
        raise ConfigError("local_sgd and grad_compression apply to strategy ddp, and parallel.mesh shards with FSDP: "
                          "remove parallel.mesh, or set local_sgd.period: 0 and grad_compression: none")
    return MeshShape.requested(sizes)


def _pipeline(parallel: dict, mesh: Optional[MeshShape], amp) -> Optional[PipelinePlan]:
    """``parallel.pipeline`` as a plan when the mesh has a ``pp`` dimension; set without one, a ConfigError."""
    values = parallel["pipeline"]
    if mesh is None or mesh.pp == 1:
        if values is not None:
            raise ConfigError("parallel.pipeline is set and parallel.mesh has no pp dimension: set parallel.mesh.pp "
                              "(e.g. 2, the number of pipeline stages), or remove parallel.pipeline")
        return None
    if amp == torch.float16:
        raise ConfigError("amp: fp16 under a pipeline (parallel.mesh.pp): each stage's gradient scaler would skip "
                          "steps on its own and the stages would part; use amp: bf16 or none")
    values = values or PIPELINE.defaults()
    plan = PipelinePlan(values["schedule"], values["microbatches"], tuple(values["split"] or ()) or None,
                        values["stages_per_rank"])
    if plan.split and mesh.pp != -1 and len(plan.split) != plan.stages(mesh.pp) - 1:
        raise ConfigError(f"parallel.pipeline.split has {len(plan.split)} point(s) and {plan.stages(mesh.pp)} "
                          f"stages need {plan.stages(mesh.pp) - 1}: name where each stage after the first begins")
    return plan


def _profile_steps(steps, profile) -> Optional[tuple]:
    """``profile_steps`` as ``(wait, warmup, active)``; ``PROFILE_STEPS`` for ``profile: true``; None: off."""
    if steps is None:
        return PROFILE_STEPS if profile else None
    return tuple(steps)


def _amp_dtype(name, device) -> Optional[torch.dtype]:
    if name == "true":
        name = "fp16" if device.type == "cuda" else "bf16"
    return _AMP_DTYPES[name]
