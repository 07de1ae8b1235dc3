"""One trial of the classification task (``basetrainer train``): its config and its run, in this process."""
import json
import os

from ..errors import ConfigError
from ..loggers import check_loggers
from ..tasks.classification import ClassificationTrainer, parse_config, prepare_data


def trial_config(argv, params: dict, trial_dir: str):
    """The task's config for ``argv`` (what ``basetrainer train`` takes: ``-c file``, flags,
    ``key=value``) with the trial's ``params`` (config key -> value) set over it, and its
    ``work_dir`` moved to ``<work_dir>/<trial_dir>``. Keys and value types are checked as for
    ``key=value`` on the command line: a search space naming an unknown key fails at once."""
    cfg = parse_config([*map(str, argv), *(f"{key}={json.dumps(value)}" for key, value in params.items())])
    if cfg.distributed:
        raise ConfigError("a hyper-parameter trial trains in the process that runs it: drop --distributed "
                          "(several gpu_id in one process train with DataParallel)")
    cfg.work_dir = os.path.join(cfg.work_dir, trial_dir)
    return cfg


def run_trial(cfg, callbacks=()):
    """Trains ``cfg`` in this process with ``callbacks`` beside the task's own; returns the trainer."""
    check_loggers(cfg.loggers, cfg)
    prepare_data(cfg)
    trainer = ClassificationTrainer(cfg)
    trainer.callbacks += list(callbacks)
    trainer.run()
    return trainer
