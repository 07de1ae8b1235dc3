"""What every task's settings share, declared once: the sections of ``--help`` and of the references, the
loop's keys as a task sets them, and the keys every task reads the same way (the config file, batches and loader
workers, the optimizer and schedule, processes and machines, loggers, checkpoints, early stopping and EMA).

A task's settings (:mod:`basetrainer.tasks.classification.settings`, :mod:`basetrainer.tasks.detection.settings`,
:mod:`basetrainer.tasks.text.settings`) take the ones it reads from ``COMMON_SETTINGS``, with its own defaults
and help where they differ.
"""
from ...config.kinds import Boolean, Choice, Integer, ListOf, Named, Number, OneOf, Text
from ...config.schema import Schema, Setting
from ...data.streaming.settings import SHARDS_SETTING
from ...distributed.process_group import check_dist_url
from ...engine.settings import LOOP_SETTINGS
from ...optimizer.build_optimizer import optimizer_name
from ...scheduler.build_scheduler import schedule_name

# The sections of --help and of the references, in order, and their titles. config.yaml leaves out the
# file it would name and what a run writes itself.
GROUPS = {
    "command line": "command line",
    "data": "data",
    "model": "model",
    "optimisation": "optimisation",
    "training loop": "training loop",
    "runtime": "runtime",
    "checkpoints": "checkpoints",
    "pruning": "pruning",
    "callbacks": "other callbacks",
    "run": "written by the run",
}
CONFIG_YAML_GROUPS = {group: title for group, title in GROUPS.items() if group not in ("command line", "run")}

_PATH = Text(non_empty=True, meaning="a path")


def _auto_or_integer(text: str):
    """A flag's text as a whole number where it is one (``--num_workers 4``), else as typed (``auto``), for the
    setting's kind to check."""
    try:
        return int(text)
    except ValueError:
        return text


def _auto_or_number(text: str):
    """A flag's text as a number where it is one (``--num_warn_up 0.5``), else as typed (``auto``)."""
    try:
        return float(text) if any(mark in text.lower() for mark in ".e") else int(text)
    except ValueError:
        return text


COMMON_SETTINGS = Schema([
    Setting("config_file", _PATH, None, "YAML config file (configs/config.yaml documents every key)",
            nullable=True, group="command line", flag={"names": ("-c", "--config_file")}),
    # ---------------------------------------------------------------- data
    SHARDS_SETTING,
    Setting("batch_size", Integer(minimum=1), 64, "images per batch and per process", unit="images", group="data",
            flag={}),
    Setting("num_workers", OneOf(Choice("auto"), Integer(minimum=0, maximum=256)), "auto",
            "data loading processes per training process (0: load in the training process; auto: on a GPU "
            "min(8, usable cores per process - 1), on the CPU 0, as its threads already use the cores)",
            unit="processes", group="data", flag={"type": _auto_or_integer}),
    Setting("on_bad_image", Choice("raise", "skip"), "raise",
            "an unreadable image: raise (stop, naming the file) or skip (warn, use another)", group="data"),
    # ---------------------------------------------------------------- optimisation
    Setting("optim_type", Named(optimizer_name, "SGD, Adam, AdamW or RMSprop"), "SGD", "the optimizer",
            group="optimisation", flag={}),
    Setting("lr", Number(0, above=True), 0.05, "initial learning rate (after warm-up)", group="optimisation",
            flag={}),
    Setting("momentum", Number(0, 1), 0.9, "SGD and RMSprop momentum", group="optimisation", flag={}),
    Setting("weight_decay", Number(0), 0.0005, "L2 weight decay", group="optimisation", flag={}),
    Setting("scheduler", Named(schedule_name, "multi-step, cosine, exp, poly, one-cycle or constant"), "cosine",
            "the lr schedule", group="optimisation", flag={}),
    Setting("milestones", OneOf(Choice("auto"), ListOf(Integer(minimum=0))), "auto",
            "multi-step: where lr is multiplied by 0.1 (auto: at half and three quarters of the run)",
            unit="epochs (steps with max_iters)", group="optimisation",
            flag={"nargs": "+", "type": _auto_or_integer}),
    Setting("num_warn_up", OneOf(Choice("auto"), Number(0)), "auto",
            "linear lr warm-up (may be fractional; 0: none; auto: one epoch, or a tenth of the run if shorter)",
            unit="epochs (steps with max_iters)", group="optimisation", flag={"type": _auto_or_number}),
    # ---------------------------------------------------------------- runtime
    Setting("distributed", Boolean(), False,
            "one process per gpu_id (without CUDA: that many CPU processes with gloo)", group="runtime", flag={}),
    Setting("num_machines", Integer(minimum=1), 1, "machines in a multi-machine job", group="runtime", flag={}),
    Setting("machine_rank", Integer(minimum=0), 0, "this machine's index, 0 to num_machines - 1", group="runtime",
            flag={}),
    Setting("dist_url", Named(check_dist_url, "auto or tcp://<host>:<port>"), "auto",
            "rendezvous: auto (a free local port, one machine) or tcp://<machine 0>:<port>", group="runtime", flag={}),
    Setting("dist_timeout", Number(0, 1e9, above=True), 1800,
            "how long a collective may wait for a slow or dead process", unit="seconds", group="runtime"),
    Setting("log_freq", Integer(minimum=1), 20, "a log line every log_freq batches", unit="batches", group="runtime",
            flag={}),
    Setting("loggers", ListOf(Choice("tensorboard", "csv", "mlflow", "wandb"), unique=True), ["tensorboard", "csv"],
            "where the run's metrics go (mlflow and wandb need their extras)", group="runtime"),
    Setting("mlflow_tracking_uri", Text(non_empty=True, meaning="a URI or a path"), None, "MLflow store (null: MLFLOW_TRACKING_URI, else SQLite under "
            "work_dir)", nullable=True, group="runtime"),
    Setting("wandb_mode", Choice("online", "offline", "disabled"), None, "W&B's mode (null: what W&B does, "
            "WANDB_MODE or online)", nullable=True, group="runtime"),
    # ---------------------------------------------------------------- checkpoints
    Setting("strict", Boolean(), False, "finetune: refuse any layer that is missing or of another shape",
            group="checkpoints"),
    Setting("save_best_k", Integer(minimum=0), 1,
            "keep the k best models by the monitored value (model/best_model_<epoch>_<value>.pth)",
            group="checkpoints"),
    Setting("monitor", Text(non_empty=True, meaning="a test value's name"), "Acc",
            "the test value that picks the best models and that early stopping watches: Acc, loss, or a metric of "
            "metrics by its class name (e.g. MulticlassF1Score)", group="checkpoints"),
    Setting("monitor_mode", Choice("max", "min"), None,
            "whether a larger (max) or smaller (min) monitored value is better (null: min for loss, else max)",
            nullable=True, group="checkpoints"),
    Setting("checkpoint_every_n_iters", Integer(minimum=0), 0,
            "also write model/last.pth every n optimizer steps (0: at epoch ends only)", unit="optimizer steps",
            group="checkpoints"),
    Setting("checkpoint_every_n_minutes", Number(0, 1e9), 0.0, "also write model/last.pth every n minutes (0: off)",
            unit="minutes", group="checkpoints"),
    # ---------------------------------------------------------------- other callbacks
    Setting("early_stopping_patience", Integer(minimum=0), 0,
            "stop after this many evaluations without a better monitored value (0: off)", unit="evaluations",
            group="callbacks"),
    Setting("ema_decay", Number(0, 1, below=True), 0.0,
            "evaluate and export an exponential moving average of the weights, e.g. 0.999 (0: off)",
            group="callbacks"),])


def task_loop_settings(default_num_epochs: int, work_dir: str, log_holds: str) -> Schema:
    """The loop's keys as a task sets them: ``num_epochs`` null meaning ``default_num_epochs`` (unless
    ``max_iters`` is set), ``gpu_id`` a list of one device or more, and ``work_dir`` required, by default
    ``work_dir``, its ``log/`` holding ``log_holds``."""
    return (
        LOOP_SETTINGS
        .replace("num_epochs", default=None, nullable=True,
                 help=f"training epochs (null: {default_num_epochs}, unless max_iters is set)")
        .replace("gpu_id", kind=ListOf(Integer(minimum=0), min_length=1), default=[0], nullable=False, flag={},
                 help="GPUs to use; with distributed, one process each (without CUDA: the CPU, or that many CPU "
                      "processes)")
        .replace("work_dir", default=work_dir, nullable=False,
                 help=f"outputs: config.yaml, model/ (checkpoints), log/ ({log_holds})")
    )
