"""The config keys the training loop reads, each declared once: kind, default, unit, help.

:class:`~.options.LoopOptions` is read from these (``LOOP_SETTINGS.read``); a task's command
line, ``configs/config.yaml`` and ``docs/reference/configuration.md`` are made from them. Any
``EngineTrainer`` reads them from its config, whatever else the config holds.
"""
import argparse

from ..config.field_rules import FieldsWhere
from ..config.kinds import Boolean, Choice, Fields, Integer, ListOf, MappingOf, Number, OneOf, Positions, Text
from ..config.schema import Schema, Setting
from ..parallel.plans import SCHEDULE_NAMES, STYLES

AMP_ALIASES = {"false": "none", "no": "none", "off": "none", "fp32": "none", "0": "none",
               "bfloat16": "bf16", "float16": "fp16", "half": "fp16", True: "true", False: "none"}
LOCAL_SGD = Fields(period=(Integer(minimum=0), 0), warmup_steps=(Integer(minimum=0), 0),
                   mode=(Choice("average", "diloco"), "average"), outer_lr=(Number(minimum=0, maximum=1e3, above=True), 0.7),
                   outer_momentum=(Number(minimum=0, maximum=1, below=True), 0.9), outer_nesterov=(Boolean(), True),
                   fragments=(Integer(minimum=1), 1), fragment_sync_delay=(Integer(minimum=0), 0))
LIGHTHOUSE = Text(pattern=r"auto|(https?://)?[A-Za-z0-9_.\-\[\]:]+:[0-9]+",
                  meaning="auto or a lighthouse address, http://host:port", plural="lighthouse addresses")
FAULT_TOLERANCE = Fields(replica_groups=(Integer(minimum=0), 0), group_id=(Integer(minimum=0), None),
                         lighthouse=(LIGHTHOUSE, "auto"), min_replicas=(Integer(minimum=1), 1),
                         heartbeat_ms=(Integer(minimum=10, maximum=3_600_000), 1000),
                         join_timeout_ms=(Integer(minimum=0, maximum=3_600_000), 30_000),
                         max_restarts=(Integer(minimum=0), 3), timeout=(Number(minimum=0, maximum=1e6, above=True), 60.0))
# DDP lays out its gradient buckets anew after its first step: PowerSGD starts at step 2 at the earliest
POWERSGD = Fields(rank=(Integer(minimum=1), 1), start_step=(Integer(minimum=2), 10))
MESH_SIZE = Integer(minimum=-1)  # -1: inferred from the number of processes (0 is refused with the product)
MESH = Fields(pp=(MESH_SIZE, 1), dp_replicate=(MESH_SIZE, 1), dp_shard=(MESH_SIZE, 1), tp=(MESH_SIZE, 1))
PATTERN = Text(non_empty=True, meaning="a module-name pattern", plural="module-name patterns")
TENSOR_PARALLEL = Fields(plan=(MappingOf(PATTERN, Choice(*STYLES)), None))
MODULE_NAME = Text(pattern=r"[A-Za-z0-9_.]+", meaning="a module name", plural="module names")
PIPELINE = Fields(schedule=(Choice(*SCHEDULE_NAMES), "1F1B"), microbatches=(Integer(minimum=1), None),
                  split=(ListOf(MODULE_NAME, min_length=1, unique=True), None),
                  stages_per_rank=(Integer(minimum=1), None))
PARALLEL = Fields(mesh=(MESH, None), tensor_parallel=(TENSOR_PARALLEL, TENSOR_PARALLEL.defaults()),
                  pipeline=(PIPELINE, None))
METRIC = Text(non_empty=True, meaning="a metric name as logs publish it")
TARGET = FieldsWhere(lambda target: next((f"{field} is missing" for field in ("metric", "value") if target[field] is None),
                                          None), "metric and value set",
                     metric=(METRIC, None), value=(Number(), None), mode=(Choice("max", "min"), "max"),
                     stop=(Boolean(), False))
LR_SCALING = FieldsWhere(lambda scaling: "base_batch_size is missing" if scaling["rule"] != "none"
                         and scaling["base_batch_size"] is None else None, "base_batch_size set unless rule is none",
                         rule=(Choice("none", "linear", "sqrt"), "none"), base_batch_size=(Integer(minimum=1), None))
CLASS_NAMES = ListOf(Text(pattern=r"[A-Za-z_][A-Za-z0-9_]*", meaning="a class name", plural="class names"), single=True)

#: Every config key the loop reads. A task adds its own keys with ``LOOP_SETTINGS + Schema([...])``.
LOOP_SETTINGS = Schema([
    # ---------------------------------------------------------------- how long
    Setting("num_epochs", Integer(minimum=1), 1, "training epochs", unit="epochs", group="optimisation", flag={}),
    Setting("max_iters", Integer(minimum=1), None,
            "or train for exactly this many optimizer steps (null: train for num_epochs)",
            unit="optimizer steps", nullable=True, group="optimisation", flag={}),
    Setting("eval_every_n_iters", Integer(minimum=0), 0,
            "evaluate (and keep the best model, stop early) every n optimizer steps and at the end (0: at every "
            "epoch end)", unit="optimizer steps", group="optimisation"),
    Setting("target", TARGET, None,
            "time to target: the first evaluation whose metric (as logs publish it: Acc, test/Acc, val/Acc) reaches "
            "value (mode max: >=, min: <=) records the wall time since training began (start-up excluded), the "
            "optimizer step, the epoch and the samples seen by all processes, in the log, the history, the trackers "
            "and work_dir/log/target.json; stop: true ends training there (null: no target)", nullable=True,
            group="optimisation"),
    Setting("lr_scaling", LR_SCALING, LR_SCALING.defaults(),
            "the optimizer's lr follows the global batch (batch_size x data-parallel processes x "
            "accumulate_grad_batches): linear, lr x global / base_batch_size, or sqrt, lr x sqrt(global / "
            "base_batch_size), before warm-up and schedules start; none: lr as given", group="optimisation"),
    # ---------------------------------------------------------------- each step
    Setting("amp", Choice("none", "bf16", "fp16", "true", aliases=AMP_ALIASES), "none",
            "mixed precision (true: fp16 on CUDA, bf16 on the CPU)", group="training loop",
            flag={"action": "store_const", "const": "true"}),
    Setting("accumulate_grad_batches", Integer(minimum=1), 1,
            "batches whose gradients are summed before each optimizer step", unit="batches", group="training loop",
            flag={}),
    Setting("clip_grad_norm", Number(minimum=0), 0.0, "clip the gradients' total norm to this (0: no clipping)",
            group="training loop", flag={}),
    Setting("channels_last", Boolean(), False, "channels-last memory format (faster convolutions on recent GPUs)",
            group="training loop", flag={}),
    Setting("compile", Boolean(), False, "torch.compile the model (slow start, faster steps)", group="training loop",
            flag={}),
    Setting("nonfinite_loss", Choice("raise", "skip", "ignore"), "raise",
            "a NaN or infinite loss: raise (stop, exit code 3), skip (drop that optimizer step) or ignore (no checks)",
            group="training loop"),
    Setting("nonfinite_check_every", Integer(minimum=1), 50,
            "batches between NaN checks (a check is a host sync; the error still names the first bad batch)",
            unit="batches", group="training loop"),
    Setting("stop_check_every", Integer(minimum=1), 10,
            "optimizer steps (and test batches) between checks, across processes, for a stop signal",
            unit="optimizer steps", group="training loop"),
    Setting("sync_bn", Boolean(), False, "synchronise BatchNorm statistics across processes (distributed only)",
            group="training loop"),
    Setting("find_unused_parameters", Boolean(), False,
            "DDP: allow parameters that get no gradient in a step (slower)", group="training loop"),
    Setting("broadcast_buffers", Boolean(), True, "DDP: copy buffers (BatchNorm statistics) from rank 0 every step",
            group="training loop"),
    Setting("deterministic", Choice(False, True, "warn"), False,
            "deterministic algorithms only (warn: warn where an operation has none): two runs on one machine end "
            "bitwise equal", group="training loop"),
    # ---------------------------------------------------------------- devices and processes
    Setting("gpu_id", OneOf(Integer(minimum=-1), ListOf(Integer(minimum=-1)),
                            Text(pattern=r"-?[0-9]+", meaning="a GPU number as text")), None,
            "GPUs to use (null, [] or -1: the CPU; without CUDA, the CPU)", nullable=True, group="runtime"),
    Setting("strategy", Choice("ddp", "fsdp"), "ddp",
            "with several processes: ddp (whole model in every process) or fsdp (parameters, gradients and "
            "optimizer state sharded)", group="runtime", flag={}),
    Setting("parallel", PARALLEL, PARALLEL.defaults(),
            "a device mesh (mesh: pp, dp_replicate, dp_shard, tp; product = processes, one may be -1) for "
            "pipeline stages, tensor parallel within groups and FSDP/HSDP across them, replacing strategy; "
            "tensor_parallel.plan maps module-name patterns to colwise, rowwise or colwise_gather (null: the "
            "trainer's or the model's plan); pipeline: schedule (1F1B, GPipe, Interleaved1F1B, ...), microbatches "
            "(null: one per stage), split (module names where stages begin; null: even), stages_per_rank; see the "
            "parallelism guide", group="runtime"),
    Setting("fsdp_shard", CLASS_NAMES, [],
            "fsdp: module classes sharded as units, e.g. [BasicBlock] ([]: the blocks the model names itself, a "
            "transformers model's decoder layers, else the repeated class holding most parameters)", group="runtime"),
    Setting("fsdp_reshard_after_forward", Boolean(), True,
            "fsdp: free each unit's gathered parameters after its forward (less memory, one more all-gather)",
            group="runtime"),
    Setting("fsdp_cpu_offload", Boolean(), False,
            "fsdp: keep parameter shards, gradients and optimizer state in host memory", group="runtime"),
    Setting("activation_checkpointing", CLASS_NAMES, [],
            "module classes that recompute their activations in backward, e.g. [BasicBlock] (less memory); [auto]: "
            "the blocks the model names itself (a transformers model's decoder layers)",
            group="runtime"),
    Setting("async_checkpoint", Boolean(), False, "write checkpoints in the background (a sharded model/last/ "
            "directory)", group="runtime"),
    Setting("local_sgd", LOCAL_SGD, LOCAL_SGD.defaults(),
            "ddp: each process steps on its own gradients and the processes average their parameters every period "
            "optimizer steps (0: off, plain DDP), after warmup_steps steps of plain DDP (post-local SGD); "
            "mode diloco (under fault_tolerance): the replica groups step alone and every period steps take an "
            "outer step (SGD: outer_lr, outer_momentum, outer_nesterov) on their averaged change, one of fragments "
            "parts of the model at a time, its average waited for fragment_sync_delay steps later (streaming "
            "DiLoCo); see the communication guide", group="runtime"),
    Setting("fault_tolerance", FAULT_TOLERANCE, FAULT_TOLERANCE.defaults(),
            "replica_groups copies of the model train together through torchft (0: off): a group that dies drops "
            "out and the others go on; restarted (up to max_restarts times, by the local job), it takes the "
            "training state from a live group; lighthouse auto (started by this job) or http://host:port; "
            "group_id: this command is that one group (null: the local job starts them all); min_replicas groups "
            "must commit each step; heartbeat_ms: a silent group drops out after this long; join_timeout_ms: how "
            "long a quorum waits for a live group late to it; timeout: of each collective, quorum and state "
            "transfer, seconds; see the faults guide", group="runtime"),
    Setting("grad_compression", Choice("none", "bf16", "fp16", "powersgd"), "none",
            "ddp: gradients all-reduced as none (fp32), bf16, fp16 or powersgd (low-rank factors)", group="runtime"),
    Setting("powersgd", POWERSGD, POWERSGD.defaults(),
            "grad_compression powersgd: gradient matrices sent as two factors of this rank, with error feedback, "
            "from optimizer step start_step on (full gradients before)", group="runtime"),
    Setting("watchdog_timeout", Number(minimum=0, maximum=1e9), 300.0,
            "a rank that finishes no step for this long (or watchdog_factor x the median step) ends itself, "
            "exit 124 (0: off)", unit="seconds", group="runtime"),
    Setting("watchdog_factor", Number(minimum=0, maximum=1e9), 20.0,
            "the watchdog's limit as a multiple of the median step time", group="runtime"),
    Setting("slurm_requeue", Boolean(), True,
            "under SLURM, a stop by SIGUSR1 requeues the job after saving; the requeued job resumes", group="runtime"),
    Setting("seed", Integer(minimum=0, maximum=2 ** 32 - 1), 2020, "seed of weights, shuffling and augmentation",
            group="runtime", flag={}),
    Setting("progress", Choice("auto", True, False), "auto",
            "progress bars, main process only (auto: on a terminal; in a file, a line every 50 batches)",
            group="runtime", flag={"action": argparse.BooleanOptionalAction}),
    Setting("profile", Boolean(), False,
            "trace a few training batches with torch.profiler into work_dir/log/profile/", group="runtime"),
    Setting("profile_steps", Positions(Integer(minimum=0), Integer(minimum=0), Integer(minimum=1),
                                       names=("wait", "warmup", "active")), None,
            "batches skipped, traced and dropped, then traced (null: [1, 1, 3] when profile is true); "
            "setting it turns the profiler on", unit="batches", nullable=True, group="runtime"),
    Setting("work_dir", Text(non_empty=True, meaning="a path"), None, "where checkpoints and logs go", nullable=True, group="runtime",
            flag={}),
    # ---------------------------------------------------------------- checkpoints
    Setting("resume", OneOf(Text(meaning="auto or a checkpoint path"), Choice(False)), None,
            "continue a run: auto (the newest last.pth under work_dir) or a checkpoint path (null, false: start "
            "afresh)", nullable=True, group="checkpoints", flag={}),
])
