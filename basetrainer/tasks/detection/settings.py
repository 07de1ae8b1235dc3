"""Every config key of the detection task, declared once: the loop's keys (with the task's defaults), those it
shares with the classification task (optimisation, runtime, checkpoints) and its own (data, model). Its
command line (:mod:`basetrainer.tasks.detection.config`) and its part of ``docs/reference/configuration.md`` and
``configs/detection.yaml`` (:mod:`basetrainer.tasks.reference`) are made from these."""
from ...config.kinds import Boolean, Choice, Integer, ListOf, Named, Number, OneOf, Text
from ...config.schema import Schema, Setting
from ...data.streaming.settings import data_or_sources
from ..common.settings import COMMON_SETTINGS, task_loop_settings
from ..common.settings import GROUPS as COMMON_GROUPS
from .models import TINY, detector_name

DATA_ROOT = "data/digit_scenes"
DEFAULT_TRAIN_IMAGES, DEFAULT_TRAIN_ANNOTATIONS = f"{DATA_ROOT}/train/images", f"{DATA_ROOT}/train/instances.json"
DEFAULT_TEST_IMAGES, DEFAULT_TEST_ANNOTATIONS = f"{DATA_ROOT}/val/images", f"{DATA_ROOT}/val/instances.json"
DEFAULT_NUM_EPOCHS = 12
DEFAULTS = {"train_annotations": DEFAULT_TRAIN_ANNOTATIONS, "test_annotations": DEFAULT_TEST_ANNOTATIONS}

GROUPS = {group: title for group, title in COMMON_GROUPS.items() if group != "pruning"}
CONFIG_YAML_GROUPS = {group: title for group, title in GROUPS.items() if group not in ("command line", "run")}

# The classification task's keys that mean the same here: how to optimise, run and checkpoint.
SHARED = ("config_file", "batch_size", "num_workers", "on_bad_image", "optim_type", "lr", "momentum", "weight_decay",
          "scheduler", "milestones", "num_warn_up", "distributed", "num_machines", "machine_rank", "dist_url",
          "dist_timeout", "shards", "log_freq", "loggers", "mlflow_tracking_uri", "wandb_mode", "strict", "save_best_k",
          "checkpoint_every_n_iters", "checkpoint_every_n_minutes", "early_stopping_patience", "ema_decay")

_PATH = Text(non_empty=True, meaning="a path")

DETECTION_ONLY = Schema([
    # ---------------------------------------------------------------- data
    Setting("train_images", data_or_sources(_PATH), DEFAULT_TRAIN_IMAGES,
            "folder of the training images (file_name in the annotations is relative to it; the generated digit "
            "scenes are written under data/digit_scenes when the defaults are missing), or COCO shards holding the "
            "images and their boxes (see shards), or a list of {path, weight} of such shards, mixed by weight",
            group="data", flag={}),
    Setting("train_annotations", _PATH, DEFAULT_TRAIN_ANNOTATIONS, "COCO instances.json of the training images",
            group="data", flag={}),
    Setting("test_images", Text(), DEFAULT_TEST_IMAGES,
            "folder of the evaluation images, or COCO shards (\"\": no evaluation)",
            nullable=True, group="data", flag={}),
    Setting("test_annotations", Text(), DEFAULT_TEST_ANNOTATIONS,
            "COCO instances.json of the evaluation images, with the same categories", nullable=True, group="data",
            flag={}),
    Setting("input_size", ListOf(Integer(minimum=16, maximum=4096), length=2, meaning="[width, height]"), [64, 64],
            "the detector's input: training images are rescaled and cropped to it; the model resizes every image to "
            "fit it and gives its boxes in the image's own pixels (SSD models take their own size)", unit="pixels",
            group="data", flag={"metavar": ("W", "H")}),
    Setting("scale_jitter", ListOf(Number(0.1, 10), length=2, meaning="[low, high]"), [0.8, 1.25],
            "training: each image is rescaled by a random factor in [low, high], then cropped (or padded) to "
            "input_size; the boxes follow ([1, 1]: no rescaling)", group="data"),
    Setting("hflip", Boolean(), False, "random horizontal flips for training (the boxes are flipped too)",
            group="data"),
    Setting("rgb_mean", ListOf(Number(0, 1), length=3), [0.5, 0.5, 0.5],
            "normalisation per channel, inside the model: (pixel / 255 - rgb_mean) / rgb_std", group="data"),
    Setting("rgb_std", ListOf(Number(0, 10, above=True), length=3), [0.5, 0.5, 0.5],
            "normalisation per channel, inside the model", group="data"),
    # ---------------------------------------------------------------- model
    Setting("net_type", Named(detector_name, f"{TINY} or a torchvision detection model: "
                                             f"fasterrcnn_mobilenet_v3_large_320_fpn, retinanet_resnet50_fpn, ..."),
            TINY, f"the detector ({TINY}: FCOS on a 4-convolution backbone, fast on a CPU; or torchvision's "
                  f"Faster R-CNN, RetinaNet, FCOS and SSD models, from scratch)", group="model", flag={}),
    Setting("pretrained", OneOf(Choice(False), _PATH), False,
            "a weights file to start from (layers of another shape, such as the heads for other classes, stay "
            "fresh), or false", group="model"),
    Setting("num_classes", Integer(minimum=1), None,
            "the number of categories (null: read from the annotations; set, it must match them)", nullable=True,
            group="model"),
    Setting("classes", ListOf(Text()), None, "the category names, read from the annotations", nullable=True,
            group="run"),
])

# The loop's keys as the task sets them, the keys it shares with the classification task, and its own.
TASK_SETTINGS = (
    task_loop_settings(DEFAULT_NUM_EPOCHS, "work_dirs/detection",
                       "text log, history, TensorBoard events, predictions.json")
    .replace("clip_grad_norm", default=10.0, help="clip the gradients' total norm to this (0: no clipping); a "
                                                   "detector's early losses spike without it")
    + Schema([COMMON_SETTINGS[name] for name in SHARED])
    .replace("batch_size", default=16)
    .replace("lr", default=0.01)
    .replace("weight_decay", default=0.0001)
    .replace("save_best_k", help="keep the k best models by test mAP (model/best_model_<epoch>_<map>.pth)")
    .replace("early_stopping_patience", help="stop after this many evaluations without a better test mAP (0: off)")
    + DETECTION_ONLY
)
