"""The detection task's command line and config: parsed, and checked before any work starts.

Settings come from, highest first: ``key=value`` overrides, flags typed on the command line, the YAML
file of ``-c``, and the defaults declared in :mod:`basetrainer.tasks.detection.settings`
(``configs/detection.yaml`` is made from them). Every value is checked against its declaration, as in
the classification task (:mod:`basetrainer.tasks.classification.config`): one line naming the key, the
value and where it came from.
"""
import torch

from ...engine.options import LoopOptions
from ...errors import ConfigError
from ...scheduler.build_scheduler import schedule_name
from ..common.command_line import parse_task_config, task_parser
from .settings import DEFAULT_NUM_EPOCHS, GROUPS, TASK_SETTINGS


def get_parser(prog=None):
    """The task's command line: a flag for the keys people type most, every key's default, and ``KEY=VALUE``."""
    return task_parser(
        TASK_SETTINGS, GROUPS, prog=prog, config_file="configs/detection.yaml",
        description="Train an object detector on COCO-format data (a folder of images and an instances.json).\n"
                    "With no data given, digits on 64x64 canvases are generated in data/digit_scenes and used.",
        examples=["--num_epochs 8",
                  "--train_images D/train2017 \\\n      --train_annotations D/annotations/instances_train2017.json",
                  "--distributed --gpu_id 0 1    # no CUDA: 2 CPU processes (gloo)"],
    )


def parse_config(argv=None, prog=None):
    """The config for ``argv`` (default ``sys.argv[1:]``), checked."""
    return parse_task_config(argv, get_parser(prog), TASK_SETTINGS, default_num_epochs=DEFAULT_NUM_EPOCHS,
                             check=check_task_config)


def check_task_config(cfg, sources=None):
    """Checks ``cfg`` (a complete detection config) against the declarations and its keys against each other:
    a one-line ConfigError for the first problem. Files are checked by those who read them, before any work."""
    given = sources or {}

    def named(*keys):
        return ", ".join(f"{key} {cfg[key]!r} ({given.get(key) or 'in the config'})" for key in keys)

    TASK_SETTINGS.check(cfg, lambda key: given.get(key) or "in the config", strict=True)
    if cfg.num_epochs is not None and cfg.max_iters is not None:
        raise ConfigError(f"{named('num_epochs', 'max_iters')}: a run is one or the other; set num_epochs: null to "
                          f"train for max_iters")
    if cfg.machine_rank >= cfg.num_machines:
        raise ConfigError(f"{named('machine_rank', 'num_machines')}: machine_rank counts from 0 to num_machines - 1")
    if cfg.scale_jitter[0] > cfg.scale_jitter[1]:
        raise ConfigError(f"{named('scale_jitter')}: write [low, high] with low <= high")
    if cfg.test_images and not cfg.test_annotations:  # test_images "" alone turns the evaluation off
        raise ConfigError(f"{named('test_images', 'test_annotations')}: give both for an evaluation, or neither "
                          f"(test_images \"\" turns it off)")
    schedule = schedule_name(cfg.scheduler)
    if schedule == "multi-step" and not cfg.milestones:
        raise ConfigError(f"{named('scheduler', 'milestones')}: multi-step needs milestones")
    if schedule == "step" or (schedule == "exp" and cfg.max_iters is not None):
        raise ConfigError(f"{named('scheduler')}: the detection task sets no step_size; use multi-step with "
                          f"milestones, or cosine")
    LoopOptions.from_config(cfg, torch.device("cpu"))  # whatever else the loop checks, checked now
