"""What every task's trainer and entry points share: the run's folders, its start-up lines, the clean-up of a run
refused at start-up, the launch over processes and the command line's error handling.

A task (:mod:`basetrainer.tasks.classification`, :mod:`basetrainer.tasks.detection.trainer`) names only what is
its own: its trainer class, where its data comes from, how its config is parsed and checked.
"""
import os
import shutil

from ... import __version__
from ...config import save_config
from ...data.loaders import resolve_num_workers
from ...distributed import comm
from ...distributed.launch import launch
from ...errors import BaseTrainerError, disk_full
from ...utils.console import exit_with
from ...utils.file_utils import create_dir
from ...utils.log import set_logger


EVALUATION_OFF = "evaluation off (no test data)"  # what a run's data line says for test_data "" (each task alike)


def start_run(trainer, cfg, *, train_from, test_from, model_note="", data_note="", data_line=None, model_line=None):
    """Sets up ``trainer`` (an ``EngineTrainer`` past its ``__init__``): its loader workers, ``model_dir``,
    ``log_dir`` and logger, then builds it; rank 0 makes the folders and saves the resolved config, and the log
    opens with three lines: the run (with the process's threads), the data (read from ``train_from`` and
    ``test_from``; ``data_note`` at its end), the model (with ``model_note`` after its input size) and the run's
    length. A task whose data are no images says its data and its model itself: ``data_line()`` and
    ``model_line()``, called once the trainer is built."""
    # Loader workers per process for both loaders: num_workers, or what "auto" means on this device.
    trainer.num_workers, trainer.num_workers_reason = resolve_num_workers(cfg.num_workers, trainer.device)
    trainer.model_dir = os.path.join(cfg.work_dir, "model")
    trainer.log_dir = os.path.join(cfg.work_dir, "log")
    # train.log appears with its first line: a run whose data fails the checks in build() leaves no work_dir.
    trainer.logger = set_logger(level="info", logfile=os.path.join(trainer.log_dir, "train.log"),
                                is_main_process=trainer.is_main_process)
    trainer.build(cfg)
    if trainer.is_main_process:
        create_dir(trainer.model_dir)
        create_dir(trainer.log_dir)
        save_config(cfg, os.path.join(cfg.work_dir, "config.yaml"))
    num_params = sum(p.numel() for p in trainer.model.parameters())
    trainer.logger.info("basetrainer %s | work_dir %s | config %s | device %s x %d process(es) | %d thread%s per "
                        "process (%s)", __version__, cfg.work_dir, cfg.config_file, trainer.device, trainer.world_size,
                        trainer.threads, "" if trainer.threads == 1 else "s", trainer.threads_reason)
    replicas = comm.get_data_parallel_world_size()  # the process group's, however it was started (launch, Ray...)
    together = f" per process, {cfg.batch_size * replicas} over {replicas} processes" if replicas > 1 else ""
    length = (f"{cfg.max_iters} steps" if cfg.max_iters else f"{cfg.num_epochs} epochs") + \
        f" of batches of {cfg.batch_size}{together} ({trainer.num_batches} per epoch)"
    if data_line is not None:
        trainer.logger.info("%s", data_line())
        trainer.logger.info("%s | %s", model_line(), length)
        return
    tested = f"{trainer.test_num} test images in {test_from}" if test_from else EVALUATION_OFF
    trainer.logger.info("data: %d train images in %s, %s, %d classes | %d loader workers per process (%s)%s",
                        trainer.train_num, train_from, tested, cfg.num_classes, trainer.num_workers,
                        trainer.num_workers_reason, f" | {data_note}" if data_note else "")
    trainer.logger.info("model: %s, %.2fM parameters, input %s%s | %s lr %g | %s", cfg.net_type, num_params / 1e6,
                        "x".join(map(str, cfg.input_size)), model_note, cfg.optim_type, cfg.lr, length)


def run_or_clean_up(trainer_class, cfg):
    """``(trainer, logs)``: ``trainer_class(cfg)`` built and run. A run that stops before its first optimizer step,
    in a work_dir it made itself, removes that work_dir: a run refused at start-up (a checkpoint it cannot resume
    from, a model that does not fit) leaves nothing behind."""
    made_here = not os.path.exists(cfg.work_dir)
    trainer = None
    try:
        trainer = trainer_class(cfg)
        return trainer, trainer.run()
    except BaseException:
        if made_here and comm.is_main_process() and _nothing_trained(trainer, cfg.work_dir):
            set_logger(level="info")  # closes train.log before its folder goes
            shutil.rmtree(cfg.work_dir, ignore_errors=True)
        raise


def _nothing_trained(trainer, work_dir) -> bool:
    """No optimizer step taken and no checkpoint written (a stop signal at start-up writes one to resume from)."""
    model_dir = os.path.join(work_dir, "model")
    saved = any(files for _, _, files in os.walk(model_dir)) if os.path.isdir(model_dir) else False
    return not saved and (trainer is None or trainer.state.global_step == 0)


def starts_rank_0(cfg) -> bool:
    """Whether this process is, or will start, the job's rank 0 (a torchrun or SLURM task knows its rank)."""
    return cfg.machine_rank == 0 and os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")) == "0"


def launch_task(run, cfg) -> None:
    """Runs ``run(cfg)`` in as many processes as ``cfg`` asks for (``gpu_id``, ``num_machines``, ``distributed``)."""
    launch(run, num_gpus_per_machine=len(cfg.gpu_id), num_machines=cfg.num_machines,
           machine_rank=cfg.machine_rank, dist_url=cfg.dist_url, distributed=cfg.distributed, args=(cfg,),
           timeout=cfg.dist_timeout)


def task_main(parse_config, train, argv, prog) -> None:
    """A task's command line: ``train(parse_config(argv, prog))``; a ``BaseTrainerError`` becomes one ``error:``
    line and its exit code."""
    try:
        cfg = parse_config(argv, prog)
        set_logger(level="info")
        train(cfg)
    except BaseTrainerError as error:
        exit_with(error)
    except OSError as error:  # a full disk found by a write of a library's own (an export, a DCP shard)
        if disk_full(error) is None:
            raise
        exit_with(disk_full(error))
