"""The classification task's configuration: every key, its default and its flag, parsed and checked.

Settings come from, highest first: ``key=value`` overrides, flags typed on the command
line, the YAML file of ``-c``, and the defaults of :func:`get_parser` (the same values as
``configs/config.yaml``, which documents every key). Unknown keys and values of the wrong
type are one-line errors.
"""
import argparse
import sys

from ..config import Config, add_override_arguments, parser_config
from ..errors import ConfigError

DEFAULT_TRAIN_DATA = "data/digits/train"
DEFAULT_TEST_DATA = "data/digits/val"
DEFAULT_NUM_EPOCHS = 12

# Keys whose value may take several types; the parser's defaults fix the type of every other key.
FREE_TYPED_KEYS = {
    "amp": None,  # none | bf16 | fp16 | true
    "pretrained": None,  # false | true | path of a weights file
    "num_classes": None,  # read from the data; present in a saved config.yaml
    "classes": None,
    "deterministic": None,  # false | true | warn
}


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
    optim.add_argument("--milestones", nargs="+", type=int, default=[6, 9],
                       help="epochs (steps with max_iters) where multi-step decays")
    optim.add_argument("--num_warn_up", type=float, default=1.0, help="epochs (steps with max_iters) of linear warm-up")
    optim.add_argument("--num_epochs", type=int, default=None,
                       help=f"training epochs ({DEFAULT_NUM_EPOCHS} unless max_iters is set)")
    optim.add_argument("--max_iters", type=int, default=None,
                       help="train for exactly this many optimizer steps instead of num_epochs")
    parser.set_defaults(eval_every_n_iters=0)

    loop = parser.add_argument_group("training loop")
    loop.add_argument("--amp", action="store_const", const="true", default="none",
                      help="mixed precision: fp16 on CUDA, bf16 on CPU (choose with amp=bf16 or amp=fp16)")
    loop.add_argument("--accumulate_grad_batches", type=int, default=1, help="batches per optimizer step")
    loop.add_argument("--clip_grad_norm", type=float, default=0.0, help="clip the gradient norm (0: off)")
    loop.add_argument("--channels_last", action="store_true", help="channels-last memory format")
    loop.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.set_defaults(nonfinite_loss="raise", nonfinite_check_every=50, stop_check_every=10, sync_bn=False)
    parser.set_defaults(deterministic=False)

    runtime = parser.add_argument_group("runtime")
    runtime.add_argument("--gpu_id", nargs="+", type=int, default=[0],
                         help="GPUs to use; with --distributed one process each (on a CPU-only machine, "
                              "that many CPU processes with gloo)")
    runtime.add_argument("--distributed", action="store_true", help="one process per gpu_id (DDP, or FSDP)")
    runtime.add_argument("--strategy", choices=("ddp", "fsdp"), default="ddp",
                         help="with --distributed: ddp (whole model per process) or fsdp (sharded)")
    parser.set_defaults(fsdp_shard=[], fsdp_reshard_after_forward=True, fsdp_cpu_offload=False,
                        activation_checkpointing=[], async_checkpoint=False)
    parser.set_defaults(local_sgd=Config(period=0, warmup_steps=0), grad_compression="none",
                        powersgd=Config(rank=1, start_step=10))
    runtime.add_argument("--num_machines", type=int, default=1, help="machines in a multi-machine job")
    runtime.add_argument("--machine_rank", type=int, default=0, help="this machine's index")
    runtime.add_argument("--dist_url", default="auto", help="auto (one machine), or tcp://<machine 0>:<port>")
    runtime.add_argument("--seed", type=int, default=2020, help="seed of weights, shuffling and augmentation")
    runtime.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True, help="progress bar")
    runtime.add_argument("--log_freq", type=int, default=20, help="a log line every N batches")
    parser.set_defaults(profile=False, profile_steps=None)
    runtime.add_argument("--work_dir", default="work_dirs/classification", help="where checkpoints and logs go")
    parser.set_defaults(loggers=["tensorboard", "csv"], mlflow_tracking_uri=None)
    parser.set_defaults(dist_timeout=1800, watchdog_timeout=300.0, watchdog_factor=20.0, slurm_requeue=True)

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
    if cfg.num_epochs is None and cfg.max_iters is None:
        cfg.num_epochs = DEFAULT_NUM_EPOCHS
    if len(cfg.input_size) != 2:
        raise ConfigError(f"input_size expects [width, height], got {cfg.input_size}")
    if cfg.ema_decay > 0 and (cfg.local_sgd or {}).get("period"):
        raise ConfigError("ema_decay with local_sgd: the EMA would average one process's own weights, not the "
                          "replicas' average that evaluation and the exported weights use; set one of them to 0")
    return cfg
