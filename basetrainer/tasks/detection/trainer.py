"""Object detection on COCO-format data: the pipeline behind ``examples/detection.py`` and
``basetrainer train --task detection``.

::

    python examples/detection.py    # digits on 64x64 canvases, generated on first use
    basetrainer train --task detection --train_images D/images --train_annotations D/instances.json \\
        --test_images V/images --test_annotations V/instances.json
    # 2 processes (2 GPUs, or 2 CPU processes):
    basetrainer train --task detection --distributed --gpu_id 0 1

A run writes to ``work_dir`` what the classification task's does (``config.yaml``, ``model/``,
``log/``), with the test mAP in the log, the history and the trackers, the best models chosen by
mAP, and ``log/predictions.json``: the final model's boxes on the test images as a COCO results file.

:class:`DetectionTrainer` fills in the ``EngineTrainer`` hooks. What a detector asks of the engine is
the engine's own, documented there: batches that are two lists (images, and target dicts with a
different number of boxes each; ``batch_size`` counts the images), a model that returns a dict of
losses in train mode (each recorded by name; their sum is what backward sees) and a list of
predictions in eval mode with no loss (``run_step`` returns ``losses=None`` then), and ``predict``
giving one prediction dict per image in dataset order.
"""
import os

from ...callbacks import EMA, EarlyStopping, LogHistory, LossesRecorder, ModelCheckpoint, MultiLossesRecorder
from ...data.streaming import is_shard_location, open_shards
from ...data.streaming.settings import shard_options
from ...engine.trainer import EngineTrainer
from ...errors import ConfigError, DataError
from ...loggers import build_loggers, check_loggers
from ...optimizer.build_optimizer import get_optimizer
from ...scheduler.build_scheduler import get_scheduler
from ..common.startup import launch_task, run_or_clean_up, start_run, starts_rank_0, task_main
from .coco import CocoDetection, ShardSample, check_images_folder, collate_detection
from .coco_evaluation import require_pycocotools
from .config import check_task_config, parse_config
from .mean_ap import MeanAPRecorder
from .models import get_detector, loss_names, without_background
from .results import write_coco_results
from .scenes import write_digit_scenes
from .settings import DATA_ROOT, DEFAULT_TEST_ANNOTATIONS, DEFAULT_TRAIN_ANNOTATIONS, DEFAULTS
from .transforms import build_transform

INDICATOR = "map"  # what the best models and early stopping are chosen by: COCO mAP at IoU 0.5 to 0.95


class DetectionTrainer(EngineTrainer):
    """Trains a detector on ``cfg.train_images``/``train_annotations`` and evaluates its COCO mAP on
    ``cfg.test_images``/``test_annotations`` every epoch."""

    resume_settings = (*EngineTrainer.resume_settings, "lr", "batch_size", "optim_type", "momentum", "weight_decay",
                       "scheduler", "milestones", "num_warn_up", "input_size", "scale_jitter")

    def __init__(self, cfg):
        super().__init__(cfg)
        start_run(self, cfg, train_from=cfg.train_images, test_from=cfg.test_images)

    # ------------------------------------------------------------------ data
    def build_train_loader(self, cfg, **kwargs):
        dataset = coco_data(cfg, "train")
        if cfg.num_classes is not None and cfg.num_classes != dataset.num_classes:
            raise ConfigError(f"num_classes {cfg.num_classes} does not match the {dataset.num_classes} categories of "
                              f"{cfg.train_annotations}; set num_classes: null to read it from the data")
        self.classes = dataset.categories
        cfg.num_classes, cfg.classes = dataset.num_classes, list(dataset.categories)
        return self.build_dataloader(dataset, cfg.batch_size, self.num_workers, phase="train", shuffle=True,
                                     collate_fn=collate_detection)

    def build_test_loader(self, cfg, **kwargs):
        if not cfg.test_images:
            return None
        dataset = coco_data(cfg, "test")
        train = self.train_loader.dataset
        if (dataset.category_ids, dataset.categories) != (train.category_ids, train.categories):
            raise DataError(f"{cfg.train_annotations} and {cfg.test_annotations} must list the same categories (ids "
                            f"and names): {len(train.categories)} against {len(dataset.categories)}, first "
                            f"difference at {_first_difference(train, dataset)}")
        # Sharded without padding: every test image is counted once, whatever the number of processes.
        return self.build_dataloader(dataset, cfg.batch_size, self.num_workers, phase="test", shuffle=False,
                                     collate_fn=collate_detection)

    # ------------------------------------------------------------------ model
    def build_model(self, cfg, **kwargs):
        model = get_detector(cfg.net_type, cfg.num_classes, cfg.input_size, cfg.rgb_mean, cfg.rgb_std,
                             pretrained=cfg.pretrained)
        return self.build_model_parallel(model, cfg.gpu_id)

    def build_criterion(self, cfg, **kwargs):
        return None  # a detector computes its own losses, given the targets

    def build_optimizer(self, cfg, **kwargs):
        return get_optimizer(self.model, optim_type=cfg.optim_type, lr=cfg.lr, momentum=cfg.momentum,
                             weight_decay=cfg.weight_decay)

    def build_callbacks(self, cfg, **kwargs):
        losses = list(loss_names(cfg.net_type))
        indicators = ["loss", *losses, "map", "map_50"]
        history = LogHistory(self.log_dir, log_freq=cfg.log_freq, logger=self.logger, indicators=indicators,
                             is_main_process=self.is_main_process,
                             loggers=build_loggers(cfg.loggers, self.log_dir, cfg, indicators=indicators),
                             artifacts=[os.path.join(self.model_dir, "model_final.pth")])
        return [
            self.build_mean_ap() if self.test_loader is not None else None,
            LossesRecorder(indicator="loss"),
            MultiLossesRecorder(indicators=losses),
            get_scheduler(cfg.scheduler, optimizer=self.optimizer, lr_init=cfg.lr, num_epochs=cfg.num_epochs,
                          num_steps=self.num_batches, milestones=cfg.milestones, num_warn_up=cfg.num_warn_up,
                          max_iters=cfg.max_iters),
            EMA(decay=cfg.ema_decay) if cfg.ema_decay > 0 else None,
            EarlyStopping(INDICATOR, patience=cfg.early_stopping_patience) if cfg.early_stopping_patience > 0 else None,
            history,
            ModelCheckpoint(model_dir=self.model_dir, epochs=cfg.num_epochs, indicator=INDICATOR, logger=self.logger,
                            save_best_k=cfg.save_best_k, every_n_iters=cfg.checkpoint_every_n_iters,
                            every_n_minutes=cfg.checkpoint_every_n_minutes),
        ]

    def build_mean_ap(self):
        """The test mAP's recorder: COCOeval against the test annotation file, or against the boxes of COCO shards,
        which hold no file."""
        dataset = self.test_loader.dataset
        annotations = dataset.annotations if isinstance(dataset, CocoDetection) else None
        return MeanAPRecorder(self.classes, category_ids=dataset.category_ids, annotations=annotations,
                              logger=self.logger)

    def run_step(self, inputs):
        """Train mode: ``(None, the model's dict of losses)``; eval mode: ``(its predictions, None)``."""
        images, targets = inputs
        if self.model.training:
            return None, self.model(images, targets)
        return self.predict_step(inputs), None

    def predict_step(self, inputs):
        """One ``{"boxes", "scores", "labels"}`` per image of the batch ``(images, targets)``, on the device."""
        return without_background(self.model(inputs[0]))


def coco_data(cfg, phase: str):
    """The data of ``phase`` ("train", "test"): the images of ``<phase>_images`` with the boxes of
    ``<phase>_annotations``, or the COCO shards ``<phase>_images`` names (which hold the boxes: the annotations
    setting is then left at its default, or names the same shards)."""
    images, annotations = cfg[f"{phase}_images"], cfg[f"{phase}_annotations"]
    transform = build_transform(cfg, train=phase == "train")
    if not _names_shards(images):
        return CocoDetection(images, annotations, transform=transform, on_bad_image=cfg.on_bad_image,
                             name=f"{phase}_annotations", images_name=f"{phase}_images")
    if annotations not in (images, DEFAULTS[f"{phase}_annotations"]):
        raise ConfigError(f"{phase}_annotations: {annotations!r}, but {phase}_images names shards, which hold the "
                          f"boxes; set {phase}_annotations to {images!r} too, or leave it out")
    dataset = open_shards(images, transform=ShardSample(transform), on_bad_image=cfg.on_bad_image,
                          name=f"{phase}_images", **shard_options(cfg))
    if dataset.kind != "coco":
        raise ConfigError(f"{phase}_images: {images} holds {dataset.kind} shards; the detection task reads COCO "
                          f"shards (basetrainer shards --coco IMAGES ANNOTATIONS)")
    return dataset


def _names_shards(images) -> bool:
    """Whether an ``images`` setting names COCO shards: one location, or a list of ``{path, weight}`` mixed."""
    return isinstance(images, list) or is_shard_location(images)


def _first_difference(train, test) -> str:
    pairs = list(zip(train.category_ids, train.categories))
    others = list(zip(test.category_ids, test.categories))
    index = next((i for i, (a, b) in enumerate(zip(pairs, others)) if a != b), min(len(pairs), len(others)))
    return f"category {index + 1}"


def prepare_data(cfg):
    """Generates the digit scenes under data/digit_scenes when a default annotation file is used and missing."""
    if any(images and path == default and not os.path.isfile(path) and not _names_shards(images)
           for path, default, images in
           ((cfg.train_annotations, DEFAULT_TRAIN_ANNOTATIONS, cfg.train_images),
            (cfg.test_annotations, DEFAULT_TEST_ANNOTATIONS, cfg.test_images))):
        write_digit_scenes(DATA_ROOT)


def check_data_paths(cfg):
    """The image folders and annotation files ``cfg`` names (not shards: their reader checks them), checked before
    any process starts: a one-line DataError naming the key at fault."""
    for phase in ("train", "test"):
        images, annotations = cfg[f"{phase}_images"], cfg[f"{phase}_annotations"]
        if images and not _names_shards(images):
            check_images_folder(images, annotations, f"{phase}_images")
            if not os.path.isfile(annotations):
                raise DataError(f"{phase}_annotations: no such annotation file {annotations}; give a COCO "
                                f"instances.json")


def run(cfg):
    """What every process runs: trains, then writes the test set's predictions (``log/predictions.json``). A run
    that stops before its first optimizer step, in a work_dir it made itself, removes that work_dir."""
    trainer, logs = run_or_clean_up(DetectionTrainer, cfg)
    if trainer.test_loader is not None:
        path = os.path.join(trainer.log_dir, "predictions.json")
        count = write_coco_results(trainer, trainer.test_loader, path)
        trainer.logger.info("wrote %d boxes on the %d test images to %s", count, trainer.test_num, path)
    return logs


def train(cfg):
    """Checks ``cfg`` and that its loggers can start, prepares the data and runs :func:`run` in as many processes
    as ``cfg`` asks for."""
    check_task_config(cfg)
    if cfg.test_images:
        require_pycocotools()  # the test mAP's, before the data is generated and the processes start
    if starts_rank_0(cfg):  # the loggers write from rank 0 only
        check_loggers(cfg.loggers, cfg)
    prepare_data(cfg)
    check_data_paths(cfg)
    launch_task(run, cfg)


def main(argv=None, prog=None):
    """Command-line entry point: parse, train; a ``BaseTrainerError`` becomes one ``error:`` line and its exit code."""
    task_main(parse_config, train, argv, prog)
