"""Every config key of the classification task, declared once: the loop's keys (with the task's defaults),
the model's and the task's own. Its command line (:mod:`.classification_config`), ``configs/config.yaml`` and
``docs/reference/configuration.md`` (:mod:`basetrainer.tasks.reference`) are made from these."""
from ..config.kinds import Boolean, Choice, Integer, ListOf, Named, Number, OneOf, Text
from ..config.schema import Schema, Setting
from ..criterion.criterion import loss_name
from ..data.streaming.settings import SHARDS_SETTING, data_or_sources
from ..distributed.process_group import check_dist_url
from ..engine.settings import LOOP_SETTINGS
from ..metric.metric_specs import MetricList
from ..models.settings import MODEL_SETTINGS
from ..optimizer.build_optimizer import optimizer_name
from ..pruning.pruner import prune_mode_name
from ..scheduler.build_scheduler import schedule_name

DEFAULT_TRAIN_DATA = "data/digits/train"
DEFAULT_TEST_DATA = "data/digits/val"
DEFAULT_NUM_EPOCHS = 12
MAX_IMAGE_SIDE = 8192  # pixels an image is resized to, at most: beyond it one image takes gigabytes

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


TASK_ONLY = Schema([
    Setting("config_file", _PATH, None, "YAML config file (configs/config.yaml documents every key)",
            nullable=True, group="command line", flag={"names": ("-c", "--config_file")}),
    # ---------------------------------------------------------------- data
    Setting("train_data", data_or_sources(_PATH), DEFAULT_TRAIN_DATA,
            "training ImageFolder, one sub-folder of images per class (the digits are written there when this "
            "default is missing), or shards of one (see shards), or a list of {path, weight} of such shards, mixed "
            "by weight", group="data", flag={}),
    Setting("test_data", Text(), DEFAULT_TEST_DATA, "evaluation ImageFolder with the same class folders, or shards "
            "of one (\"\": none)", nullable=True, group="data", flag={}),
    SHARDS_SETTING,
    Setting("crop_ratio", Number(0, 1, above=True), 0.875,
            "images are resized to input_size / crop_ratio, then cropped to input_size (at random for training, "
            "in the centre for testing)", group="data"),
    Setting("augmentation", Choice("resize_crop", "imagenet"), "resize_crop",
            "resize_crop: resize to input_size / crop_ratio, then crop input_size (at random for training, in the "
            "centre for testing); imagenet: torchvision's ImageNet recipe, a random area (crop_scale) and aspect "
            "ratio (3/4 to 4/3) resized to input_size for training, the shorter side resized to max(input_size) / "
            "crop_ratio and the centre cropped for testing", group="data"),
    Setting("crop_scale", ListOf(Number(0, 1, above=True), length=2), [0.08, 1.0],
            "augmentation imagenet: the training crop's area, smallest and largest, as a fraction of the image's",
            group="data"),
    Setting("hflip", Boolean(), False, "random horizontal flips for training", group="data"),
    Setting("decoder", Choice("auto", "cpu", "pil", "nvjpeg"), "auto",
            "how images are decoded and augmented: cpu (libjpeg-turbo at reduced size where the crop allows, uint8 "
            "in the loader, float and normalisation on the device after the copy), pil (torchvision's reference: "
            "Pillow, ToTensor and Normalize in the loader), nvjpeg (JPEGs decoded, cropped and flipped on the GPU, "
            "in batches; needs CUDA); auto: cpu", group="data"),
    Setting("rgb_mean", ListOf(Number(0, 1), length=3), None,
            "normalisation per channel: (pixel / 255 - rgb_mean) / rgb_std (null: a timm model's own, else "
            "[0.5, 0.5, 0.5])", nullable=True, group="data"),
    Setting("rgb_std", ListOf(Number(0, 10, above=True), length=3), None,
            "normalisation per channel (ImageNet's: [0.229, 0.224, 0.225]; null: a timm model's own, else "
            "[0.5, 0.5, 0.5])", nullable=True, group="data"),
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
    Setting("loss_type", Named(loss_name, "CELoss, LabelSmoothing, FocalLoss, BCEWithLogitsLoss, L1Loss, MSELoss or "
                                          "SmoothL1Loss"), "CELoss", "the loss", group="optimisation", flag={}),
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
    Setting("finetune", _PATH, None, "start from the weights in this file (layers of another shape stay fresh)",
            nullable=True, group="checkpoints", flag={}),
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
    # ---------------------------------------------------------------- pruning
    Setting("use_prune", Boolean(), False, "remove channels before training, then fine-tune the smaller model",
            group="pruning", flag={}),
    Setting("prune_sparsity", Number(0, 1, above=True, below=True), 0.3, "fraction of each layer's channels removed",
            group="pruning", flag={}),
    Setting("prune_mod", Named(prune_mode_name, "L1, L2, FPGM, Slim or Level"), "L1",
            "how channels are ranked: L1, L2, FPGM, Slim (BatchNorm scale), Level (weights only)", group="pruning",
            flag={}),
    Setting("prune_bn_l1", Number(0), 0.0, "network slimming: add prune_bn_l1 x sum|BatchNorm scale| to the loss "
            "(0: off)", group="pruning"),
    # ---------------------------------------------------------------- other callbacks
    Setting("metrics", MetricList(), [],
            "torchmetrics metrics of every evaluation, e.g. [MulticlassAccuracy, {MulticlassF1Score: {average: "
            "macro}}, MulticlassAUROC]; num_classes is filled in; published under the class name "
            "(test/MulticlassF1Score for target), in the log, the history and the trackers (needs pip install "
            "\"basetrainer[metrics]\")", group="callbacks"),
    Setting("early_stopping_patience", Integer(minimum=0), 0,
            "stop after this many evaluations without a better monitored value (0: off)", unit="evaluations",
            group="callbacks"),
    Setting("ema_decay", Number(0, 1, below=True), 0.0,
            "evaluate and export an exponential moving average of the weights, e.g. 0.999 (0: off)",
            group="callbacks"),
])


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


# The loop's keys as the task sets them (its own defaults where a run of the example needs them), the keys
# the model is built from, and the task's own.
TASK_SETTINGS = (
    task_loop_settings(DEFAULT_NUM_EPOCHS, "work_dirs/classification", "text log, history, TensorBoard events")
    + MODEL_SETTINGS
    + TASK_ONLY
)
