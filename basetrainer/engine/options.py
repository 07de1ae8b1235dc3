"""The trainer's own config keys, read and checked in one place."""
from dataclasses import dataclass, field
from typing import Optional

import torch

from ..config import option
from ..errors import ConfigError
from ..parallel.communication import GRAD_COMPRESSIONS, Communication

_AMP_DTYPES = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}
_AMP_ALIASES = {"false": "none", "no": "none", "off": "none", "fp32": "none", "0": "none",
                "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
NONFINITE_MODES = ("raise", "skip", "ignore")
STRATEGIES = ("ddp", "fsdp")
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
    ``communication`` is what DDP's replicas send (keys ``local_sgd``, ``grad_compression``,
    ``powersgd``; see :mod:`basetrainer.parallel.communication`).

    ``profile_steps`` is ``(wait, warmup, active)``: training batches skipped, traced and
    thrown away, then traced with ``torch.profiler`` into ``<work_dir>/log/profile`` (without
    a work_dir, ``log/profile`` in the current folder; see :mod:`.profiling`). ``profile: true``
    alone means ``(1, 1, 3)``; None: no profiler at all.

    Faults: ``slurm_requeue`` requeues a SLURM job stopped by SIGUSR1 (:mod:`.preemption`);
    ``watchdog_timeout`` (seconds; 0: off) and ``watchdog_factor`` bound how long a step may
    take before the rank ends itself (:mod:`basetrainer.distributed.watchdog`); ``deterministic`` (True, or "warn":
    warn where an operation has no deterministic version instead of raising) asks torch for
    deterministic algorithms (:mod:`.determinism`).
    """

    num_epochs: int = 1
    max_iters: Optional[int] = None
    eval_every_n_iters: int = 0
    progress: bool = True
    seed: int = 2020
    gpu_id: object = None
    amp: Optional[torch.dtype] = None
    accumulate_grad_batches: int = 1
    clip_grad_norm: float = 0.0
    channels_last: bool = False
    compile: bool = False
    nonfinite_loss: str = "raise"
    nonfinite_check_every: int = 50
    stop_check_every: int = 10
    sync_bn: bool = False
    find_unused_parameters: bool = False
    broadcast_buffers: bool = True
    strategy: str = "ddp"
    fsdp_shard: tuple = ()
    fsdp_reshard_after_forward: bool = True
    fsdp_cpu_offload: bool = False
    activation_checkpointing: tuple = ()
    async_checkpoint: bool = False
    communication: Communication = field(default_factory=Communication)
    resume: Optional[str] = None
    work_dir: Optional[str] = None
    profile_steps: Optional[tuple] = None
    slurm_requeue: bool = True
    watchdog_timeout: float = 300.0
    watchdog_factor: float = 20.0
    deterministic: object = False

    @classmethod
    def from_config(cls, cfg, device: torch.device) -> "LoopOptions":
        """Reads the keys from ``cfg`` (a dict or an attribute-access config); missing or None keys take the defaults."""
        nonfinite = str(option(cfg, "nonfinite_loss", "raise")).lower()
        if nonfinite not in NONFINITE_MODES:
            raise ConfigError(f"nonfinite_loss: {nonfinite!r} is not one of {', '.join(NONFINITE_MODES)}")
        resume = option(cfg, "resume", None)
        max_iters = option(cfg, "max_iters", None)
        if max_iters is not None:
            if option(cfg, "num_epochs", None) is not None:
                raise ConfigError(f"num_epochs ({option(cfg, 'num_epochs', None)}) and max_iters ({max_iters}) are "
                                  f"both set: a run is one or the other; set num_epochs: null to train for max_iters")
            max_iters = _positive_int(cfg, "max_iters", None)
        eval_every = option(cfg, "eval_every_n_iters", 0)
        if isinstance(eval_every, bool) or not isinstance(eval_every, int) or eval_every < 0:
            raise ConfigError(f"eval_every_n_iters expects an integer >= 0 (0: at epoch ends), got {eval_every!r}")
        return cls(
            num_epochs=_positive_int(cfg, "num_epochs", 1),
            max_iters=max_iters,
            eval_every_n_iters=eval_every,
            progress=bool(option(cfg, "progress", True)),
            seed=int(option(cfg, "seed", 2020)),
            gpu_id=option(cfg, "gpu_id", None),
            amp=_parse_amp(option(cfg, "amp", "none"), device),
            accumulate_grad_batches=_positive_int(cfg, "accumulate_grad_batches", 1),
            clip_grad_norm=float(option(cfg, "clip_grad_norm", 0.0)),
            channels_last=bool(option(cfg, "channels_last", False)),
            compile=bool(option(cfg, "compile", False)),
            nonfinite_loss=nonfinite,
            nonfinite_check_every=_positive_int(cfg, "nonfinite_check_every", 50),
            stop_check_every=_positive_int(cfg, "stop_check_every", 10),
            sync_bn=bool(option(cfg, "sync_bn", False)),
            find_unused_parameters=bool(option(cfg, "find_unused_parameters", False)),
            broadcast_buffers=bool(option(cfg, "broadcast_buffers", True)),
            **_parallel_options(cfg),
            communication=_communication(cfg, _parse_amp(option(cfg, "amp", "none"), device)),
            resume=None if resume in (None, False, "", "none", "None") else str(resume),
            work_dir=option(cfg, "work_dir", None),
            profile_steps=_profile_steps(cfg),
            **_fault_options(cfg),
        )


def _fault_options(cfg) -> dict:
    """SLURM requeue after SIGUSR1, the watchdog's limits, deterministic algorithms."""
    limits = {}
    for key, default in (("watchdog_timeout", 300.0), ("watchdog_factor", 20.0)):
        value = option(cfg, key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"{key} expects a number >= 0, got {value!r}")
        limits[key] = float(value)
    deterministic = option(cfg, "deterministic", False)
    if deterministic not in (True, False, "warn"):
        raise ConfigError(f"deterministic expects true, false or warn, got {deterministic!r}")
    return dict(slurm_requeue=bool(option(cfg, "slurm_requeue", True)), deterministic=deterministic, **limits)


def _parallel_options(cfg) -> dict:
    """``strategy`` (``ddp`` or ``fsdp``, for several processes), the FSDP settings, the module
    classes that recompute their activations in backward, and background checkpoint saves."""
    strategy = str(option(cfg, "strategy", "ddp")).lower()
    if strategy not in STRATEGIES:
        raise ConfigError(f"strategy: {strategy!r} is not one of {', '.join(STRATEGIES)}")
    return dict(strategy=strategy, fsdp_shard=_class_names(cfg, "fsdp_shard"),
                fsdp_reshard_after_forward=bool(option(cfg, "fsdp_reshard_after_forward", True)),
                fsdp_cpu_offload=bool(option(cfg, "fsdp_cpu_offload", False)),
                activation_checkpointing=_class_names(cfg, "activation_checkpointing"),
                async_checkpoint=bool(option(cfg, "async_checkpoint", False)))


def _communication(cfg, amp: Optional[torch.dtype]) -> Communication:
    """What DDP's replicas send: ``local_sgd: {period, warmup_steps}`` (period 0 or null: off),
    ``grad_compression: none|bf16|fp16|powersgd`` and ``powersgd: {rank, start_step}``; the
    combinations that cannot work are refused here, before anything is built (one process: in
    ``select_strategy``, which knows the processes)."""
    local_sgd = _settings(cfg, "local_sgd", {"period": 0, "warmup_steps": 0}, "{period: 16, warmup_steps: 0}")
    powersgd = _settings(cfg, "powersgd", {"rank": 1, "start_step": 10}, "{rank: 4, start_step: 10}")
    compression = str(option(cfg, "grad_compression", "none")).lower()
    if compression not in GRAD_COMPRESSIONS:
        raise ConfigError(f"grad_compression: {compression!r} is not one of {', '.join(GRAD_COMPRESSIONS)}")
    for key, value, least in (("local_sgd.period", local_sgd["period"], 0),
                              ("local_sgd.warmup_steps", local_sgd["warmup_steps"], 0),
                              ("powersgd.rank", powersgd["rank"], 1), ("powersgd.start_step", powersgd["start_step"], 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            why = " (DDP lays out its buckets anew after its first step)" if key == "powersgd.start_step" else ""
            raise ConfigError(f"{key} expects an integer >= {least}{why}, got {value!r}")
    communication = Communication(local_sgd["period"], local_sgd["warmup_steps"], compression, powersgd["rank"],
                                  powersgd["start_step"])
    if communication.local_sgd_period and compression != "none":
        raise ConfigError(f"local_sgd and grad_compression: {compression} are alternatives (after its warm-up, local "
                          f"SGD sends no gradients): set grad_compression: none, or local_sgd.period: 0")
    if communication.enabled and str(option(cfg, "strategy", "ddp")).lower() != "ddp":
        raise ConfigError("local_sgd and grad_compression apply to strategy ddp (fsdp reduces its gradient shards "
                          "itself): set strategy: ddp, or local_sgd.period: 0 and grad_compression: none")
    if communication.local_sgd_period and amp == torch.float16:
        raise ConfigError("local_sgd with amp: fp16: each replica's gradient scaler would skip steps on its own and "
                          "the replicas would stop averaging together; use amp: bf16 or none")
    return communication


def _settings(cfg, key, defaults: dict, example: str) -> dict:
    """The mapping ``key`` (missing or null: empty) filled up from ``defaults``; a key ``defaults`` lacks is refused."""
    value = option(cfg, key, {})
    if not isinstance(value, dict) or set(value) - set(defaults):
        raise ConfigError(f"{key} expects a mapping of {' and '.join(defaults)}, e.g. {key}: {example}, got {value!r}")
    return {**defaults, **{name: given for name, given in value.items() if given is not None}}


def _profile_steps(cfg) -> Optional[tuple]:
    """``profile_steps`` as ``(wait, warmup, active)``; ``PROFILE_STEPS`` for ``profile: true``; None: off."""
    steps = option(cfg, "profile_steps", None)
    if steps is None:
        return PROFILE_STEPS if option(cfg, "profile", False) else None
    if (not isinstance(steps, (list, tuple)) or len(steps) != 3
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in steps) or steps[2] < 1):
        raise ConfigError(f"profile_steps expects [wait, warmup, active] batches (integers >= 0, active >= 1), "
                          f"e.g. [1, 1, 3], got {steps!r}")
    return tuple(steps)


def _class_names(cfg, key) -> tuple:
    value = option(cfg, key, ())
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(name, str) and name for name in names):
        raise ConfigError(f"{key} expects a list of module class names, e.g. [TransformerBlock], got {value!r}")
    return tuple(names)


def _positive_int(cfg, key, default) -> int:
    value = option(cfg, key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key} expects an integer >= 1, got {value!r}")
    return value


def _parse_amp(value, device) -> Optional[torch.dtype]:
    name = str(value).strip().lower()
    if name == "true":
        name = "fp16" if device.type == "cuda" else "bf16"
    name = _AMP_ALIASES.get(name, name)
    if name not in _AMP_DTYPES:
        raise ConfigError(f"amp: {value!r} is not one of none, bf16, fp16")
    return _AMP_DTYPES[name]
