"""The classification task's command line and config: parsed, and checked before any work starts.

Settings come from, highest first: ``key=value`` overrides, flags typed on the command
line, the YAML file of ``-c``, and the defaults declared in :mod:`basetrainer.tasks.classification.settings`
(``configs/config.yaml`` is made from them and documents every key). Every value, wherever
it came from, is checked against its declaration, and the keys against each other; an
unknown key, a value of the wrong type or out of range is a one-line ConfigError naming
the key, the value, where it came from and what is allowed.
"""
import importlib.util

import torch

from ...engine.options import LoopOptions
from ...errors import ConfigError
from ...models.build_models import check_model_options, data_defaults
from ...scheduler.build_scheduler import schedule_name
from ..common.command_line import parse_task_config, task_parser
from .settings import DEFAULT_NUM_EPOCHS, DEFAULT_TEST_DATA, DEFAULT_TRAIN_DATA, GROUPS, MAX_IMAGE_SIDE, TASK_SETTINGS

__all__ = ["DEFAULT_NUM_EPOCHS", "DEFAULT_TEST_DATA", "DEFAULT_TRAIN_DATA", "TRANSFORM_KEYS", "check_task_config",
           "check_transform", "get_parser", "parse_config", "unset_data_defaults"]

TRANSFORM_KEYS = ("input_size", "crop_ratio", "rgb_mean", "rgb_std", "augmentation")  # what build_transform reads
DATA_DEFAULT_KEYS = ("input_size", "rgb_mean", "rgb_std")  # null: what the network says (a timm model's own)


def get_parser(prog=None):
    """The task's command line: a flag for the keys people type most, every key's default (those of
    ``configs/config.yaml``), and ``KEY=VALUE`` for any key."""
    # tests/e2e/test_help_examples.py runs every example of this help text.
    return task_parser(
        TASK_SETTINGS, GROUPS, prog=prog, config_file="configs/config.yaml",
        description="Train an image classifier on ImageFolder data (one sub-folder per class).\n"
                    "With no data given, the bundled handwritten digits are written to data/digits and used.",
        notes=["docs/reference/configuration.md describes every key."],
        examples=["-c configs/config.yaml",
                  "lr=0.05 milestones=[8,12] use_prune=false",
                  "--gpu_id 0 1 --opts lr=0.05 amp=bf16",
                  "--distributed --gpu_id 0 1    # without CUDA: 2 CPU processes (gloo)"],
    )


def parse_config(argv=None, prog=None):
    """The config for ``argv`` (default ``sys.argv[1:]``), checked (see the module docstring)."""
    return parse_task_config(argv, get_parser(prog), TASK_SETTINGS, default_num_epochs=DEFAULT_NUM_EPOCHS,
                             check=check_task_config)


def check_task_config(cfg, sources=None):
    """Checks ``cfg`` (a complete task config) against the declarations and its keys against each other,
    before anything is made from it: a one-line ConfigError for the first problem. ``sources`` says where
    each key's value came from; without it, the config as given is named. Files and folders it names are
    the business of those who read them (a missing one is refused before the work dir is made)."""
    given = sources or {}

    def source(key):
        return given.get(key) or "in the config"

    def named(*keys):
        return _named(cfg, source, keys)

    TASK_SETTINGS.check(cfg, source, strict=True)
    if cfg.num_epochs is not None and cfg.max_iters is not None:
        raise ConfigError(f"{named('num_epochs', 'max_iters')}: a run is one or the other; set num_epochs: null to "
                          f"train for max_iters")
    if cfg.machine_rank >= cfg.num_machines:
        raise ConfigError(f"{named('machine_rank', 'num_machines')}: machine_rank counts from 0 to num_machines - 1")
    check_transform({**cfg, **unset_data_defaults(cfg)}, source)
    if cfg.crop_scale[0] > cfg.crop_scale[1]:
        raise ConfigError(f"{named('crop_scale')}: give the smallest area first, then the largest")
    if cfg.decoder == "nvjpeg" and not torch.cuda.is_available():
        raise ConfigError(f"{named('decoder')}: nvjpeg decodes on the GPU, and this machine has no CUDA device; use "
                          f"decoder: auto (or cpu) here")
    if cfg.decoder == "nvjpeg" and importlib.util.find_spec("torchcodec") is None:
        raise ConfigError(f'{named("decoder")}: nvjpeg decodes with TorchCodec, which is not installed; '
                          f'pip install "basetrainer[nvjpeg]"')
    _check_schedule(cfg, named)
    if cfg.ema_decay > 0 and (cfg.local_sgd or {}).get("period"):
        raise ConfigError(f"{named('ema_decay', 'local_sgd')}: the EMA would average one process's own weights, not "
                          f"the replicas' average that evaluation and the exported weights use; set one of them to 0")
    try:
        check_model_options(cfg.net_type, cfg.width_mult, cfg.pretrained, cfg.input_size)
    except ConfigError as error:
        raise ConfigError(f"{error} (given {named('net_type', 'width_mult', 'input_size')})") from None
    monitored = ["Acc", "loss", *(item if isinstance(item, str) else next(iter(item)) for item in cfg.metrics)]
    if cfg.monitor not in monitored:
        raise ConfigError(f"{named('monitor', 'metrics')}: the evaluations publish {', '.join(monitored)}; set "
                          f"monitor to one of them, or add its metric to metrics")
    LoopOptions.from_config(cfg, torch.device("cpu"))  # whatever else the loop checks, checked now


def unset_data_defaults(cfg) -> dict:
    """The values ``cfg`` leaves unset (null) of ``input_size``, ``rgb_mean`` and ``rgb_std``: those its
    ``net_type`` says (:func:`~basetrainer.models.build_models.data_defaults`)."""
    unset = [key for key in DATA_DEFAULT_KEYS if cfg.get(key) is None]
    return {key: data_defaults(cfg.get("net_type"))[key] for key in unset} if unset else {}


def check_transform(cfg, source) -> None:
    """Checks the keys images are transformed by (``TRANSFORM_KEYS``; ``source(key)`` says where each came
    from), and that the size images are resized to stays within ``MAX_IMAGE_SIDE``."""
    TASK_SETTINGS.check({key: cfg[key] for key in TRANSFORM_KEYS}, source)
    resized = max(side / cfg["crop_ratio"] for side in cfg["input_size"])  # inf for a crop_ratio of 1e-309
    if resized > MAX_IMAGE_SIDE:
        named = _named(cfg, source, ("input_size", "crop_ratio"))
        raise ConfigError(f"{named}: images would be resized to {resized:.0f} pixels (input_size / crop_ratio) "
                          f"before cropping, more than {MAX_IMAGE_SIDE}; raise crop_ratio or lower input_size")


def _named(cfg, source, keys) -> str:
    """``input_size [32, 32] (from --input_size), crop_ratio 0.5 (in c.yaml line 3)``: keys, values, sources."""
    return ", ".join(f"{key} {cfg[key]!r} ({source(key)})" for key in keys)


def _check_schedule(cfg, named):
    schedule = schedule_name(cfg.scheduler)
    if schedule == "multi-step" and not cfg.milestones:
        raise ConfigError(f"{named('scheduler', 'milestones')}: multi-step needs milestones, the epochs where lr is "
                          f"multiplied by 0.1 (steps with max_iters)")
    if schedule == "step" or (schedule == "exp" and cfg.max_iters is not None):
        raise ConfigError(f"{named('scheduler')}: the classification task sets no step_size, which scheduler "
                          f"{cfg.scheduler} needs{' with max_iters' if schedule == 'exp' else ''}; use multi-step "
                          f"with milestones, or cosine")
