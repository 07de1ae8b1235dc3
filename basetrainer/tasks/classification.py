"""Image classification on ImageFolder data: the pipeline behind ``examples/example.py`` and ``basetrainer train``.

::

    python examples/example.py                         # the handwritten digits, written on first use
    basetrainer train -c configs/config.yaml --train_data D/train --test_data D/val
    basetrainer train --distributed --gpu_id 0 1       # 2 processes (2 GPUs, or 2 CPU processes with gloo)
    basetrainer train lr=0.05 milestones=[8,12]        # any config key as key=value

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
import argparse
import os
import sys

import torch
from torchvision import transforms

from .. import __version__
from ..callbacks import EMA, EarlyStopping, LogHistory, LossesRecorder, ModelCheckpoint, MultiLossesRecorder
from ..config import add_override_arguments, parser_config, save_config
from ..criterion.criterion import get_criterion
from ..data import CheckedImageFolder, check_same_classes, write_digits_imagefolder
from ..engine import checkpoint
from ..engine.launch import launch
from ..engine.trainer import EngineTrainer
from ..errors import BaseTrainerError, ConfigError, one_line
from ..metric.accuracy_recorder import AccuracyRecorder
from ..models.build_models import get_models
from ..optimizer.build_optimizer import get_optimizer
from ..pruning import apply_architecture_spec, bn_l1_penalty, model_pruning
from ..scheduler.build_scheduler import get_scheduler
from ..utils.file_utils import create_dir
from ..utils.log import set_logger

DIGITS_ROOT = os.path.join("data", "digits")
DEFAULT_TRAIN_DATA = "data/digits/train"
DEFAULT_TEST_DATA = "data/digits/val"

# Keys whose value may take several types; the parser's defaults fix the type of every other key.
FREE_TYPED_KEYS = {
    "amp": None,  # none | bf16 | fp16 | true
    "pretrained": None,  # false | true | path of a weights file
    "num_classes": None,  # read from the data; present in a saved config.yaml
    "classes": None,
}


class ClassificationTrainer(EngineTrainer):
    """Trains a torchvision classifier on ``cfg.train_data`` and evaluates it on ``cfg.test_data`` every epoch."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.model_dir = os.path.join(cfg.work_dir, "model")
        self.log_dir = os.path.join(cfg.work_dir, "log")
        # train.log appears with its first line: a run whose data fails the checks in build() leaves no work_dir.
        self.logger = set_logger(level="info", logfile=os.path.join(self.log_dir, "train.log"),
                                 is_main_process=self.is_main_process)
        self.build(cfg)
        if self.is_main_process:
            create_dir(self.model_dir)
            create_dir(self.log_dir)
            save_config(cfg, os.path.join(cfg.work_dir, "config.yaml"))
        num_params = sum(p.numel() for p in self.model.parameters())
        self.logger.info("basetrainer %s | work_dir %s | config %s | device %s x %d process(es)",
                         __version__, cfg.work_dir, cfg.config_file, self.device, self.world_size)
        self.logger.info("data: %d train images in %s, %d test images in %s, %d classes",
                         self.train_num, cfg.train_data, self.test_num, cfg.test_data, cfg.num_classes)
        self.logger.info("model: %s, %.2fM parameters, input %s | %s lr %g | %d epochs of %d batches",
                         cfg.net_type, num_params / 1e6, "x".join(map(str, cfg.input_size)), cfg.optim_type,
                         cfg.lr, cfg.num_epochs, self.num_steps)

    # ------------------------------------------------------------------ data
    def build_train_loader(self, cfg, **kwargs):
        dataset = CheckedImageFolder(cfg.train_data, transform=build_transform(cfg, train=True),
                                     on_bad_image=cfg.on_bad_image, name="train_data")
        self.classes = dataset.classes
        cfg.num_classes, cfg.classes = len(dataset.classes), list(dataset.classes)
        return self.build_dataloader(dataset, cfg.batch_size, cfg.num_workers, phase="train", shuffle=True,
                                     distributed=cfg.distributed)

    def build_test_loader(self, cfg, **kwargs):
        if not cfg.test_data:
            return None
        dataset = CheckedImageFolder(cfg.test_data, transform=build_transform(cfg, train=False),
                                     on_bad_image=cfg.on_bad_image, name="test_data")
        check_same_classes(self.train_loader.dataset, dataset)
        # Sharded without padding: every test image is counted once, whatever the number of processes.
        return self.build_dataloader(dataset, cfg.batch_size, cfg.num_workers, phase="test", shuffle=False,
                                     distributed=cfg.distributed)

    # ------------------------------------------------------------------ model
    def build_model(self, cfg, **kwargs):
        model = get_models(cfg.net_type, input_size=cfg.input_size, num_classes=cfg.num_classes,
                           width_mult=cfg.width_mult, pretrained=cfg.pretrained)
        if cfg.finetune:
            self.load_finetune(model, cfg.finetune, cfg)
        if cfg.use_prune:
            # Every rank calls it: rank 0 prunes, the others receive its architecture and weights.
            # The same seed gives the same pruned model again when a run resumes.
            width, height = cfg.input_size
            model = model_pruning(model, input_size=[1, 3, height, width], sparsity=cfg.prune_sparsity,
                                  prune_mod=cfg.prune_mod, output_prune=os.path.join(cfg.work_dir, "prune"),
                                  logger=self.logger)
        return self.build_model_parallel(model, cfg.gpu_id, distributed=cfg.distributed)

    def load_finetune(self, model, path, cfg):
        """Loads the weights of ``path`` into ``model``; layers whose shape differs (the head) keep fresh weights."""
        state = checkpoint.load_checkpoint(path)
        spec = state.get("architecture") if isinstance(state, dict) else None
        if spec:  # a pruned model: narrow the fresh one to its widths first
            apply_architecture_spec(model, _with_own_head(spec, model, cfg.num_classes))
        report = checkpoint.load_weights(model, state, strict=cfg.strict, name=path)
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
        return [
            AccuracyRecorder(target_names=self.classes, indicator="Acc", log_dir=self.log_dir, logger=self.logger),
            *losses,
            get_scheduler(cfg.scheduler, optimizer=self.optimizer, lr_init=cfg.lr, num_epochs=cfg.num_epochs,
                          num_steps=self.num_steps, milestones=cfg.milestones, num_warn_up=cfg.num_warn_up),
            EMA(decay=cfg.ema_decay) if cfg.ema_decay > 0 else None,
            EarlyStopping("Acc", patience=cfg.early_stopping_patience) if cfg.early_stopping_patience > 0 else None,
            LogHistory(self.log_dir, log_freq=cfg.log_freq, logger=self.logger, indicators=indicators,
                       is_main_process=self.is_main_process),
            ModelCheckpoint(model_dir=self.model_dir, epochs=cfg.num_epochs, indicator="Acc", logger=self.logger,
                            save_best_k=cfg.save_best_k, every_n_iters=cfg.checkpoint_every_n_iters,
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
    """Resize to ``input_size / crop_ratio``, crop ``input_size`` (random for training, centred for
    testing), optionally flip, then normalise with ``rgb_mean``/``rgb_std``."""
    width, height = cfg.input_size
    steps = [transforms.Resize([round(height / cfg.crop_ratio), round(width / cfg.crop_ratio)])]
    if train:
        steps.append(transforms.RandomCrop([height, width]))
        if cfg.hflip:
            steps.append(transforms.RandomHorizontalFlip())
    else:
        steps.append(transforms.CenterCrop([height, width]))
    steps += [transforms.ToTensor(), transforms.Normalize(mean=cfg.rgb_mean, std=cfg.rgb_std)]
    return transforms.Compose(steps)


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


# ---------------------------------------------------------------------- configuration
def get_parser(prog=None):
    """Every config key with its default (the values of ``configs/config.yaml``).

    Keys without a flag are set in the YAML file or as ``key=value``.
    """
    class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
        """Shows the defaults, and the description and the examples as written here."""

    # tests/test_help_examples.py runs every example of this help text.
    parser = argparse.ArgumentParser(
        prog=prog,
        formatter_class=HelpFormatter,
        description="Train an image classifier on ImageFolder data (one sub-folder per class).\n"
                    "With no data given, the bundled handwritten digits are written to data/digits and used.",
        epilog="Any key of configs/config.yaml can be set as KEY=VALUE; after a flag that takes several\n"
               "values, such as --gpu_id, put them behind --opts. Precedence: KEY=VALUE, then flags,\n"
               "then the -c YAML file, then the defaults above.\n"
               "\n"
               "examples:\n"
               "  %(prog)s -c configs/config.yaml\n"
               "  %(prog)s lr=0.05 milestones=[8,12] use_prune=false\n"
               "  %(prog)s --gpu_id 0 1 --opts lr=0.05 amp=bf16\n"
               "  %(prog)s --distributed --gpu_id 0 1    # without CUDA: 2 CPU processes (gloo)",
    )
    parser.add_argument("-c", "--config_file", default=None, help="YAML config file (configs/config.yaml "
                                                                  "documents every key)")
    data = parser.add_argument_group("data")
    data.add_argument("--train_data", default=DEFAULT_TRAIN_DATA,
                      help="training ImageFolder (the digits are written there when the default is missing)")
    data.add_argument("--test_data", default=DEFAULT_TEST_DATA, help="evaluation ImageFolder, same class folders")
    data.add_argument("--input_size", nargs=2, type=int, default=[32, 32], metavar=("W", "H"),
                      help="network input width and height")
    data.add_argument("--batch_size", type=int, default=64, help="images per batch and process")
    data.add_argument("--num_workers", type=int, default=0, help="data loading processes per training process")
    parser.set_defaults(crop_ratio=0.875, hflip=False, rgb_mean=[0.5, 0.5, 0.5], rgb_std=[0.5, 0.5, 0.5],
                        on_bad_image="raise")

    model = parser.add_argument_group("model")
    model.add_argument("--net_type", default="resnet18", help="any torchvision classification model")
    model.add_argument("--width_mult", type=float, default=1.0, help="width multiplier (MobileNets only)")
    parser.set_defaults(pretrained=False)

    optim = parser.add_argument_group("optimisation")
    optim.add_argument("--optim_type", default="SGD", help="SGD, Adam, AdamW or RMSprop")
    optim.add_argument("--lr", type=float, default=0.05, help="initial learning rate")
    optim.add_argument("--momentum", type=float, default=0.9, help="SGD and RMSprop momentum")
    optim.add_argument("--weight_decay", type=float, default=0.0005, help="L2 weight decay")
    optim.add_argument("--loss_type", default="CELoss", help="CELoss, LabelSmoothing, FocalLoss, ...")
    optim.add_argument("--scheduler", default="cosine", help="multi-step, cosine, exp, poly, one-cycle, ...")
    optim.add_argument("--milestones", nargs="+", type=int, default=[6, 9], help="epochs where multi-step decays")
    optim.add_argument("--num_warn_up", type=float, default=1.0, help="epochs of linear warm-up")
    optim.add_argument("--num_epochs", type=int, default=12, help="training epochs")

    loop = parser.add_argument_group("training loop")
    loop.add_argument("--amp", action="store_const", const="true", default="none",
                      help="mixed precision: fp16 on CUDA, bf16 on CPU (choose with amp=bf16 or amp=fp16)")
    loop.add_argument("--accumulate_grad_batches", type=int, default=1, help="batches per optimizer step")
    loop.add_argument("--clip_grad_norm", type=float, default=0.0, help="clip the gradient norm (0: off)")
    loop.add_argument("--channels_last", action="store_true", help="channels-last memory format")
    loop.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.set_defaults(nonfinite_loss="raise", nonfinite_check_every=50, stop_check_every=10, sync_bn=False)

    runtime = parser.add_argument_group("runtime")
    runtime.add_argument("--gpu_id", nargs="+", type=int, default=[0],
                         help="GPUs to use; with --distributed one process each (on a CPU-only machine, "
                              "that many CPU processes with gloo)")
    runtime.add_argument("--distributed", action="store_true", help="one process per gpu_id (DDP, or FSDP)")
    runtime.add_argument("--strategy", choices=("ddp", "fsdp"), default="ddp",
                         help="with --distributed: ddp (whole model per process) or fsdp (sharded)")
    parser.set_defaults(fsdp_shard=[], fsdp_reshard_after_forward=True, fsdp_cpu_offload=False,
                        activation_checkpointing=[], async_checkpoint=False)
    runtime.add_argument("--num_machines", type=int, default=1, help="machines in a multi-machine job")
    runtime.add_argument("--machine_rank", type=int, default=0, help="this machine's index")
    runtime.add_argument("--dist_url", default="auto", help="auto (one machine), or tcp://<machine 0>:<port>")
    runtime.add_argument("--seed", type=int, default=2020, help="seed of weights, shuffling and augmentation")
    runtime.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True, help="progress bar")
    runtime.add_argument("--log_freq", type=int, default=20, help="a log line every N batches")
    runtime.add_argument("--work_dir", default="work_dirs/classification", help="where checkpoints and logs go")
    parser.set_defaults(dist_timeout=1800)

    ckpt = parser.add_argument_group("checkpoints")
    ckpt.add_argument("--resume", default=None, help="continue a run: auto (the newest last.pth in work_dir) or a path")
    ckpt.add_argument("--finetune", default=None, help="start from these weights (layers of another shape stay fresh)")
    parser.set_defaults(strict=False, save_best_k=1, checkpoint_every_n_iters=0, checkpoint_every_n_minutes=0.0)

    prune = parser.add_argument_group("pruning")
    prune.add_argument("--use_prune", action="store_true", help="prune channels before training, then fine-tune")
    prune.add_argument("--prune_sparsity", type=float, default=0.3, help="fraction of channels removed per layer")
    prune.add_argument("--prune_mod", default="L1", help="L1, L2, FPGM, Slim or Level")
    parser.set_defaults(prune_bn_l1=0.0, early_stopping_patience=0, ema_decay=0.0)
    return add_override_arguments(parser)


def parse_config(argv=None, prog=None):
    """The config for ``argv`` (default ``sys.argv[1:]``), checked strictly (see the module docstring)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = get_parser(prog)
    # Intermixed: key=value overrides may come before, between or after the flags.
    # The pipeline saves its resolved config itself: no args_config.yaml for a run without -c.
    cfg = parser_config(parser.parse_intermixed_args(argv), parser=parser, strict=True, argv=argv,
                        known=FREE_TYPED_KEYS, save_args=False)
    if len(cfg.input_size) != 2:
        raise ConfigError(f"input_size expects [width, height], got {cfg.input_size}")
    return cfg


def prepare_data(cfg):
    """Writes the bundled digits to data/digits when a default data folder is used and missing."""
    defaults_missing = [path for path, default in ((cfg.train_data, DEFAULT_TRAIN_DATA),
                                                   (cfg.test_data, DEFAULT_TEST_DATA))
                        if path == default and not os.path.isdir(path)]
    if defaults_missing:
        write_digits_imagefolder(DIGITS_ROOT)


def run(cfg):
    """What every process runs."""
    return ClassificationTrainer(cfg).run()


def train(cfg):
    """Prepares the data and runs :func:`run` in as many processes as ``cfg`` asks for."""
    prepare_data(cfg)
    launch(run, num_gpus_per_machine=len(cfg.gpu_id), num_machines=cfg.num_machines,
           machine_rank=cfg.machine_rank, dist_url=cfg.dist_url, distributed=cfg.distributed, args=(cfg,),
           timeout=cfg.dist_timeout)


def main(argv=None, prog=None):
    """Command-line entry point: parse, train; a ``BaseTrainerError`` becomes one ``error:`` line and its exit code."""
    try:
        cfg = parse_config(argv, prog)
        set_logger(level="info")
        train(cfg)
    except BaseTrainerError as error:
        print(f"error: {one_line(error)}", file=sys.stderr)
        sys.exit(error.exit_code)
