"""Image classification on ImageFolder data: the pipeline behind ``examples/example.py`` and ``basetrainer train``.

::

    python examples/example.py                         # the handwritten digits, written on first use
    basetrainer train -c configs/config.yaml --train_data D/train --test_data D/val
    # 2 processes (2 GPUs, or 2 CPU processes with gloo):
    basetrainer train --distributed --gpu_id 0 1
    basetrainer train lr=0.05 'milestones=[8,12]'      # any config key as key=value

Settings come from, highest first: ``key=value`` overrides, flags typed on the command
line, the YAML file of ``-c``, and the defaults of :func:`get_parser` (the same values
as ``configs/config.yaml``, which documents every key). Unknown keys and values of the
wrong type are one-line errors.

A run writes to ``work_dir``: ``config.yaml`` (the resolved config, with the classes read
from the data), ``model/`` (``last.pth`` to resume from, the best models by test
accuracy, ``model_final.pth``) and ``log/`` (``train.log``, ``history.csv``/``.jsonl``,
TensorBoard events, the confusion matrix and the training curves).

:class:`ClassificationTrainer` fills in the ``EngineTrainer`` hooks: a train loader on
``train_data`` and a test loader on ``test_data`` (both sharded over processes), a
torchvision backbone (fine-tuned from ``finetune``, pruned with ``use_prune``), the loss,
optimizer and schedule by name, and the callbacks that record and save.
"""
import os

import torch

from ...callbacks import EMA, EarlyStopping, LogHistory, LossesRecorder, ModelCheckpoint, MultiLossesRecorder
from ...checkpoint import files as checkpoint_files
from ...checkpoint.weights import load_weights
from ...criterion.criterion import get_criterion
from ...data import check_same_classes, write_digits_imagefolder
from ...data.images.crops import Recipe
from ...data.images.decoders import image_decoder, image_folder, resolve_decoder
from ...data.images.photo_digits import write_photo_digits
from ...data.images.reference_recipe import reference_transform
from ...data.streaming import is_shard_location, open_shards
from ...data.streaming.settings import shard_options
from ...engine.trainer import EngineTrainer
from ...errors import ConfigError
from ...loggers import build_loggers, check_loggers
from ...metric.accuracy_recorder import AccuracyRecorder
from ...metric.metrics_recorder import MetricsRecorder
from ...models.build_models import check_input_size, get_models
from ...models.timm_models import check_prunable, is_timm_name
from ...optimizer.build_optimizer import get_optimizer
from ...pruning import apply_architecture_spec, bn_l1_penalty, model_pruning
from ...scheduler.build_scheduler import get_scheduler
from ..common.startup import launch_task, run_or_clean_up, start_run, starts_rank_0, task_main
from .config import check_task_config, get_parser, parse_config, unset_data_defaults

__all__ = ["ClassificationTrainer", "build_transform", "get_parser", "parse_config", "prepare_data", "run", "train", "main"]

DIGITS_ROOT = os.path.join("data", "digits")
PHOTO_DIGITS_ROOT = os.path.join("data", "photo_digits")

class ClassificationTrainer(EngineTrainer):
    """Trains a torchvision classifier on ``cfg.train_data`` and evaluates it on ``cfg.test_data`` every epoch."""

    resume_settings = (*EngineTrainer.resume_settings, "lr", "batch_size", "optim_type", "momentum", "weight_decay",
                       "loss_type", "scheduler", "milestones", "num_warn_up")

    def __init__(self, cfg):
        # input_size, rgb_mean, rgb_std left null: the network's own (a timm model's), saved with the config
        self.data_defaults = unset_data_defaults(cfg)
        cfg.update(self.data_defaults)
        super().__init__(cfg)
        self.decoder, why = resolve_decoder(cfg.get("decoder", "auto"), self.device)
        start_run(self, cfg, train_from=cfg.train_data, test_from=cfg.test_data, model_note=self._data_defaults_said(),
                  data_note=f"decoder {self.decoder} ({why})")

    def _data_defaults_said(self) -> str:
        """What the start-up line says of the input size and normalisation a timm model chose (nothing else)."""
        if not self.data_defaults or not is_timm_name(self.cfg.net_type):
            return ""
        cfg = self.cfg
        return (f", mean {cfg.rgb_mean}, std {cfg.rgb_std} ({', '.join(self.data_defaults)}: "
                f"{cfg.net_type}'s defaults)")

    # ------------------------------------------------------------------ data
    def build_train_loader(self, cfg, **kwargs):
        if isinstance(cfg.train_data, list) or is_shard_location(cfg.train_data):
            dataset, collate = self._shards(cfg, "train_data", train=True)
        else:
            dataset, collate = self._image_folder(cfg, cfg.train_data, train=True, name="train_data")
        self.classes = dataset.classes
        cfg.num_classes, cfg.classes = len(dataset.classes), list(dataset.classes)
        return self.build_dataloader(dataset, cfg.batch_size, self.num_workers, phase="train", shuffle=True,
                                     collate_fn=collate)

    def build_test_loader(self, cfg, **kwargs):
        if not cfg.test_data:
            return None
        if is_shard_location(cfg.test_data):
            dataset, collate = self._shards(cfg, "test_data", train=False)
        else:
            dataset, collate = self._image_folder(cfg, cfg.test_data, train=False, name="test_data")
        check_same_classes(self.train_loader.dataset, dataset)
        # Sharded without padding: every test image is counted once, whatever the number of processes.
        return self.build_dataloader(dataset, cfg.batch_size, self.num_workers, phase="test", shuffle=False,
                                     collate_fn=collate)

    def _image_folder(self, cfg, root, train, name):
        """``(dataset, collate_fn)``: the folder ``root`` as ``decoder`` makes its batches (see
        :mod:`basetrainer.data.images`)."""
        return image_folder(root, Recipe.from_config(cfg, train), self.decoder, cfg.rgb_mean, cfg.rgb_std,
                            on_bad_image=cfg.on_bad_image, name=name)

    def _shards(self, cfg, key, train):
        """``(dataset, collate_fn)``: the image-folder shards ``cfg[key]`` names (a folder basetrainer shards wrote,
        or a remote URL), their images decoded by ``decoder`` as a folder's files are."""
        decode, collate = image_decoder(Recipe.from_config(cfg, train), self.decoder, cfg.rgb_mean, cfg.rgb_std)
        dataset = open_shards(cfg[key], decode=decode, on_bad_image=cfg.on_bad_image, name=key, **shard_options(cfg))
        if dataset.kind != "images":
            raise ConfigError(f"{key}: {cfg[key]} holds {dataset.kind} shards; the classification task reads shards "
                              f"of an image folder (basetrainer shards --image-folder)")
        return dataset, collate

    # ------------------------------------------------------------------ model
    def build_model(self, cfg, **kwargs):
        model = get_models(cfg.net_type, input_size=cfg.input_size, num_classes=cfg.num_classes,
                           width_mult=cfg.width_mult, pretrained=cfg.pretrained)
        check_input_size(model, cfg.input_size, cfg.net_type)
        if cfg.finetune:
            self.load_finetune(model, cfg.finetune, cfg)
        if cfg.use_prune:
            if is_timm_name(cfg.net_type):
                check_prunable(model, cfg.net_type)
            # Every rank calls it: rank 0 prunes, the others receive its architecture and weights.
            # The same seed gives the same pruned model again when a run resumes.
            width, height = cfg.input_size
            model = model_pruning(model, input_size=[1, 3, height, width], sparsity=cfg.prune_sparsity,
                                  prune_mod=cfg.prune_mod, output_prune=os.path.join(cfg.work_dir, "prune"),
                                  logger=self.logger)
        return self.build_model_parallel(model, cfg.gpu_id)

    def load_finetune(self, model, path, cfg):
        """Loads the weights of ``path`` into ``model``; layers whose shape differs (the head) keep fresh weights."""
        state = checkpoint_files.load_checkpoint(path)
        spec = state.get("architecture") if isinstance(state, dict) else None
        if spec:  # a pruned model: narrow the fresh one to its widths first
            apply_architecture_spec(model, _with_own_head(spec, model, cfg.num_classes))
        report = load_weights(model, state, strict=cfg.strict, name=path)
        kept = f"; fresh weights for {', '.join(report['skipped'])}" if report["skipped"] else ""
        self.logger.info("finetune: loaded %s%s", path, kept)

    def build_criterion(self, cfg, **kwargs):
        return get_criterion(cfg.loss_type, cfg.num_classes, device=self.device)

    def build_optimizer(self, cfg, **kwargs):
        # Built after build_model: after pruning, it holds the pruned model's parameters.
        return get_optimizer(self.model, optim_type=cfg.optim_type, lr=cfg.lr, momentum=cfg.momentum,
                             weight_decay=cfg.weight_decay)

    def build_callbacks(self, cfg, **kwargs):
        indicators = ["loss", "Acc"]
        losses = [LossesRecorder(indicator="loss")]
        if cfg.prune_bn_l1 > 0:
            losses.append(MultiLossesRecorder(indicators=["cls", "bn_l1"]))
            indicators += ["cls", "bn_l1"]
        # torchmetrics metrics (the metrics extra): refused here, before training, when the logits cannot feed them
        metrics = [MetricsRecorder(cfg.metrics, num_classes=cfg.num_classes, target_names=self.classes,
                                   logger=self.logger)] if cfg.metrics else []
        indicators += [key for recorder in metrics for key in recorder.metrics]
        monitor_mode = cfg.monitor_mode or ("min" if cfg.monitor == "loss" else "max")
        history = LogHistory(self.log_dir, log_freq=cfg.log_freq, logger=self.logger, indicators=indicators,
                             is_main_process=self.is_main_process,
                             loggers=build_loggers(cfg.loggers, self.log_dir, cfg, indicators=indicators),
                             artifacts=[os.path.join(self.log_dir, "confusion_matrix.png"),
                                        os.path.join(self.model_dir, "model_final.pth")])
        return [
            AccuracyRecorder(target_names=self.classes, indicator="Acc", log_dir=self.log_dir, logger=self.logger),
            *losses,
            *metrics,
            get_scheduler(cfg.scheduler, optimizer=self.optimizer, lr_init=cfg.lr, num_epochs=cfg.num_epochs,
                          num_steps=self.num_batches, milestones=cfg.milestones, num_warn_up=cfg.num_warn_up,
                          max_iters=cfg.max_iters),
            EMA(decay=cfg.ema_decay) if cfg.ema_decay > 0 else None,
            EarlyStopping(cfg.monitor, patience=cfg.early_stopping_patience, mode=monitor_mode)
            if cfg.early_stopping_patience > 0 else None,
            history,
            ModelCheckpoint(model_dir=self.model_dir, epochs=cfg.num_epochs, indicator=cfg.monitor, mode=monitor_mode,
                            logger=self.logger, save_best_k=cfg.save_best_k, every_n_iters=cfg.checkpoint_every_n_iters,
                            every_n_minutes=cfg.checkpoint_every_n_minutes),
        ]

    def run_step(self, inputs):
        images, targets = inputs
        outputs = self.model(images)
        loss = self.criterion(outputs, targets)
        if self.cfg.prune_bn_l1 > 0:
            # Network slimming: the L1 term drives unneeded BatchNorm scales to 0 for prune_mod Slim.
            # "loss" (LossesRecorder) is the sum; "cls" (the classification loss) and "bn_l1" are recorded apart.
            return outputs, {"cls": loss, "bn_l1": bn_l1_penalty(self.model, self.cfg.prune_bn_l1)}
        return outputs, loss


def build_transform(cfg, train):
    """torchvision's reference transform of ``cfg`` for a Pillow image, ending in a normalised float tensor
    (``decoder: pil``'s, and ``basetrainer predict``'s; see :mod:`basetrainer.data.images.crops` for the recipes);
    ``rgb_mean``/``rgb_std`` left null: the network's own."""
    cfg = {**cfg, **unset_data_defaults(cfg)}
    return reference_transform(Recipe.from_config(cfg, train), cfg["rgb_mean"], cfg["rgb_std"])


def _with_own_head(spec, model, num_classes):
    """``spec`` with the classifier keeping ``model``'s ``num_classes`` outputs (a pruned model
    fine-tuned on other classes keeps its pruned input width and gets a fresh head)."""
    modules = dict(model.named_modules())
    adjusted = dict(spec)
    for name, entry in spec.items():
        module = modules.get(name)
        if (isinstance(module, torch.nn.Linear) and module.out_features == num_classes
                and entry.get("out_features") not in (None, num_classes)):
            tensors = {key: [num_classes, *shape[1:]] for key, shape in entry["tensors"].items()}
            adjusted[name] = {**entry, "out_features": num_classes, "tensors": tensors}
    return adjusted


def prepare_data(cfg):
    """Writes a bundled data set where a config names its folders and they are missing: the handwritten digits
    (data/digits, the defaults) or the photo-like JPEG digits (data/photo_digits, configs/photo_digits.yaml's)."""
    for root, write in ((DIGITS_ROOT, write_digits_imagefolder), (PHOTO_DIGITS_ROOT, write_photo_digits)):
        folders = (os.path.join(root, "train"), os.path.join(root, "val"))
        if any(path in folders and not os.path.isdir(path) for path in (cfg.train_data, cfg.test_data)):
            write(root)


def run(cfg):
    """What every process runs. A run that stops before its first optimizer step, in a work_dir it made itself,
    removes that work_dir: a run refused at start-up (a checkpoint it cannot resume from, a model that does
    not fit) leaves nothing behind."""
    return run_or_clean_up(ClassificationTrainer, cfg)[1]


def train(cfg):
    """Checks ``cfg``, that its loggers can start and that the model's logits can feed its ``metrics``, prepares
    the data and runs :func:`run` in as many processes as ``cfg`` asks for."""
    check_task_config(cfg)
    if starts_rank_0(cfg):  # the loggers write from rank 0 only
        check_loggers(cfg.loggers, cfg)
    prepare_data(cfg)
    _check_metrics(cfg)
    launch_task(run, cfg)


def _check_metrics(cfg) -> None:
    """Tries each of ``metrics`` on logits of as many classes as ``train_data`` has class folders, so that one they
    cannot feed (or an argument value it refuses) is refused in one line before any process starts; the trainer
    tries them again on the classes it reads (a folder without class folders is the data check's to report)."""
    if cfg.metrics and isinstance(cfg.train_data, str) and os.path.isdir(cfg.train_data):
        num_classes = sum(entry.is_dir() for entry in os.scandir(cfg.train_data))
        try:
            if num_classes:
                MetricsRecorder(cfg.metrics, num_classes=num_classes)
        except ConfigError as error:
            raise ConfigError(f"config key 'metrics': {error}") from None


def main(argv=None, prog=None):
    """Command-line entry point: parse, train; a ``BaseTrainerError`` becomes one ``error:`` line and its exit code."""
    task_main(parse_config, train, argv, prog)
