"""Every config key of the classification task, declared once: the loop's keys (with the task's defaults),
the model's, the keys every task shares (:mod:`basetrainer.tasks.common.settings`) and the task's own. Its command
line (:mod:`basetrainer.tasks.classification.config`), ``configs/config.yaml`` and ``docs/reference/configuration.md``
(:mod:`basetrainer.tasks.reference`) are made from these."""
from ...config.kinds import Boolean, Choice, ListOf, Named, Number, Text
from ...config.schema import Schema, Setting
from ...criterion.criterion import loss_name
from ...data.streaming.settings import data_or_sources
from ...metric.metric_specs import MetricList
from ...models.settings import MODEL_SETTINGS
from ...pruning.pruner import prune_mode_name
from ..common import settings as common
from ..common.settings import COMMON_SETTINGS, task_loop_settings

DEFAULT_TRAIN_DATA = "data/digits/train"
DEFAULT_TEST_DATA = "data/digits/val"
DEFAULT_NUM_EPOCHS = 12
MAX_IMAGE_SIDE = 8192  # pixels an image is resized to, at most: beyond it one image takes gigabytes

# The sections of --help and of the references: all of them, pruning included (detection and text leave it out).
GROUPS = common.GROUPS
CONFIG_YAML_GROUPS = common.CONFIG_YAML_GROUPS

_PATH = Text(non_empty=True, meaning="a path")

# The task's keys in the order of --help and of the references: its own, and the shared ones where they read best.
TASK_ONLY = Schema([
    COMMON_SETTINGS["config_file"],
    # ---------------------------------------------------------------- data
    Setting("train_data", data_or_sources(_PATH), DEFAULT_TRAIN_DATA,
            "training ImageFolder, one sub-folder of images per class (the digits are written there when this "
            "default is missing), or shards of one (see shards), or a list of {path, weight} of such shards, mixed "
            "by weight", group="data", flag={}),
    Setting("test_data", Text(), DEFAULT_TEST_DATA, "evaluation ImageFolder with the same class folders, or shards "
            "of one (\"\": none)", nullable=True, group="data", flag={}),
    COMMON_SETTINGS["shards"],
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
    COMMON_SETTINGS["batch_size"],
    COMMON_SETTINGS["num_workers"],
    COMMON_SETTINGS["on_bad_image"],
    # ---------------------------------------------------------------- optimisation
    COMMON_SETTINGS["optim_type"],
    COMMON_SETTINGS["lr"],
    COMMON_SETTINGS["momentum"],
    COMMON_SETTINGS["weight_decay"],
    Setting("loss_type", Named(loss_name, "CELoss, LabelSmoothing, FocalLoss, BCEWithLogitsLoss, L1Loss, MSELoss or "
                                          "SmoothL1Loss"), "CELoss", "the loss", group="optimisation", flag={}),
    COMMON_SETTINGS["scheduler"],
    COMMON_SETTINGS["milestones"],
    COMMON_SETTINGS["num_warn_up"],
    # ---------------------------------------------------------------- runtime
    COMMON_SETTINGS["distributed"],
    COMMON_SETTINGS["num_machines"],
    COMMON_SETTINGS["machine_rank"],
    COMMON_SETTINGS["dist_url"],
    COMMON_SETTINGS["dist_timeout"],
    COMMON_SETTINGS["log_freq"],
    COMMON_SETTINGS["loggers"],
    COMMON_SETTINGS["mlflow_tracking_uri"],
    COMMON_SETTINGS["wandb_mode"],
    # ---------------------------------------------------------------- checkpoints
    Setting("finetune", _PATH, None, "start from the weights in this file (layers of another shape stay fresh)",
            nullable=True, group="checkpoints", flag={}),
    COMMON_SETTINGS["strict"],
    COMMON_SETTINGS["save_best_k"],
    COMMON_SETTINGS["monitor"],
    COMMON_SETTINGS["monitor_mode"],
    COMMON_SETTINGS["checkpoint_every_n_iters"],
    COMMON_SETTINGS["checkpoint_every_n_minutes"],
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
    COMMON_SETTINGS["early_stopping_patience"],
    COMMON_SETTINGS["ema_decay"],
])

# The loop's keys as the task sets them (its own defaults where a run of the example needs them), the keys
# the model is built from, and the task's own.
TASK_SETTINGS = (
    task_loop_settings(DEFAULT_NUM_EPOCHS, "work_dirs/classification", "text log, history, TensorBoard events")
    + MODEL_SETTINGS
    + TASK_ONLY
)
