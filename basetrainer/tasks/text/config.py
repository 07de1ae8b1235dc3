"""The text task's command line and config: parsed, and checked before any work starts.

Settings come from, highest first: ``key=value`` overrides, flags typed on the command line, the YAML file of
``-c``, and the defaults declared in :mod:`basetrainer.tasks.text.settings` (``configs/text.yaml`` is made from
them). Every value is checked against its declaration, as in the other tasks: one line naming the key, the value
and where it came from. The model, the datasets and the hub are checked by :func:`~basetrainer.tasks.text.trainer.prepare`, before any
process starts.
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
        TASK_SETTINGS, GROUPS, prog=prog, config_file="configs/text.yaml",
        description="Fine-tune a pretrained transformer (a causal LM, or a sequence classifier) on text data, with\n"
                    "LoRA through peft or in full; the result is a save_pretrained folder (model/model_final).\n"
                    "With no model and data given, a tiny Llama-like model is written to data/text/tiny-llama and\n"
                    "fine-tuned on the bundled instructions: nothing is fetched.",
        examples=["lora.r=8 lr=0.003 --num_epochs 3",
                  "--model Qwen/Qwen2.5-0.5B --train_data train.jsonl lora.r=16 amp=bf16",
                  "--task_type sequence_classification --train_data reviews.csv",
                  "--distributed --gpu_id 0 1 strategy=fsdp lora.r=8    # 2 GPUs, 2 CPUs"],
    )


def parse_config(argv=None, prog=None):
    """The config for ``argv`` (default ``sys.argv[1:]``), checked."""
    return parse_task_config(argv, get_parser(prog), TASK_SETTINGS, default_num_epochs=DEFAULT_NUM_EPOCHS,
                             check=check_task_config)


def check_task_config(cfg, sources=None):
    """Checks ``cfg`` (a complete text config) against the declarations and its keys against each other: a
    one-line ConfigError for the first problem."""
    given = sources or {}

    def named(*keys):
        return ", ".join(f"{key} {cfg[key]!r} ({given.get(key) or 'in the config'})" for key in keys)

    checked = TASK_SETTINGS.check(cfg, lambda key: given.get(key) or "in the config", strict=True)
    for key in ("fields", "lora", "generate"):  # a mapping given in part: its other fields at their defaults
        if checked.get(key) is not None:
            cfg[key] = checked[key]
    if cfg.num_epochs is not None and cfg.max_iters is not None:
        raise ConfigError(f"{named('num_epochs', 'max_iters')}: a run is one or the other; set num_epochs: null to "
                          f"train for max_iters")
    if cfg.machine_rank >= cfg.num_machines:
        raise ConfigError(f"{named('machine_rank', 'num_machines')}: machine_rank counts from 0 to num_machines - 1")
    if cfg.task_type == "sequence_classification":
        if cfg.format in ("prompt_completion", "chat"):
            raise ConfigError(f"{named('format', 'task_type')}: a classifier reads a text and its label; set format: "
                              f"text (or auto)")
        if cfg.packing:
            raise ConfigError(f"{named('packing', 'task_type')}: a classifier takes one text per sample; set "
                              f"packing: false")
    published = ("loss", "Acc") if cfg.task_type == "sequence_classification" else ("loss", "perplexity")
    if cfg.monitor not in published:
        what = "a classifier's" if cfg.task_type == "sequence_classification" else "a causal LM's"
        raise ConfigError(f"{named('monitor')}: {what} evaluation publishes {' and '.join(published)}; monitor one")
    schedule = schedule_name(cfg.scheduler)
    if schedule == "multi-step" and not cfg.milestones:
        raise ConfigError(f"{named('scheduler', 'milestones')}: multi-step needs milestones")
    if schedule == "step" or (schedule == "exp" and cfg.max_iters is not None):
        raise ConfigError(f"{named('scheduler')}: the text task sets no step_size; use cosine, or multi-step with "
                          f"milestones")
    LoopOptions.from_config(cfg, torch.device("cpu"))  # whatever else the loop checks, checked now
