"""What ``basetrainer lr-find`` and ``basetrainer batch-find`` share: the task's flags and ``key=value`` overrides
with the tool's own flags beside them, the task's trainer built from them in every process of the job, and the
folder the tool writes to. The task is classification, or with ``--task text`` the text task's
(:mod:`basetrainer.tasks.text`).

The task's config is parsed and checked by the task itself
(:func:`~basetrainer.tasks.classification.config.parse_config`);
the tool's flags come off the command line first, so that a tool flag is never taken for a config key. The tool
writes to ``<work_dir>/<tool>/``: its results, and the trainer's ``config.yaml`` and ``log/train.log``. A tool
that fails removes that folder when it made it, so a refused run leaves nothing behind.
"""
import copy
import importlib
import os
import shutil
import sys
from dataclasses import dataclass
from typing import Callable, Tuple

from ..config.flags import ArgumentParser, add_setting_flags
from ..distributed import comm
from ..distributed.launch import launch
from ..errors import BaseTrainerError, ConfigError
from ..tasks import TASKS, take_task
from ..tasks.classification import ClassificationTrainer, prepare_data
from ..tasks.classification.config import parse_config
from ..utils.console import exit_with
from ..utils.log import set_logger

TOOL_TASKS = ("classification", "text")


def task_pipeline(task: str):
    """``(trainer class, prepare(cfg), parse_config)`` of the task named (classification or text)."""
    if task == "text":
        from ..tasks import text

        return text.TextTrainer, text.prepare, text.parse_config
    return ClassificationTrainer, prepare_data, parse_config


def task_parser(task: str, prog=None):
    """The parser of the task named (its flags and ``KEY=VALUE``), with ``--task`` itself beside them."""
    parser = importlib.import_module(f"{TASKS[task]}.config").get_parser(prog)  # the task's own, as train's
    parser.add_argument_group("the task").add_argument(
        "--task", choices=TOOL_TASKS, default="classification",
        help="the task whose model, data and flags the tool takes (each has flags of its own: give --task text "
             "with --help to see the text task's)")
    return parser


@dataclass(frozen=True)
class ToolCommand:
    """One tool's command: ``folder`` under work_dir, its ``--help`` text (``description``, its flags' ``title``,
    ``examples``: command lines after the program's name), its ``settings`` and ``check`` (the settings' values,
    checked, a dict), and ``probe(trainer, options, out_dir)``, which every process runs on the built trainer."""

    folder: str
    description: str
    settings: object
    title: str
    examples: Tuple[str, ...]
    check: Callable
    probe: Callable

    def get_parser(self, prog=None, task="classification"):
        """The command line of ``--task task``: the task's flags and overrides, and the tool's own (also for the
        docs)."""
        return tool_parser(prog, self.description, self.settings, self.title, self.examples, task=task)

    def parse(self, argv, prog=None):
        """``(task, cfg, options)``: what :meth:`main` reads from ``argv`` before any work: the task, its checked
        config and the tool's checked settings (a dict); ``--help`` prints the task's and the tool's flags."""
        task, argv = take_task(sys.argv[1:] if argv is None else list(argv))
        if task not in TOOL_TASKS:
            raise ConfigError(f"--task {task!r}: the tools take {' or '.join(TOOL_TASKS)}")
        prog = f"{prog} --task {task}" if prog and task != "classification" else prog  # as train's help says it
        cfg, options = parse_tool_command(argv, prog, self.description, self.settings, self.title,
                                          self.examples, task=task)
        return task, cfg, self.check(options, "from the command line")

    def main(self, argv=None, prog=None):
        """Command-line entry point; a ``BaseTrainerError`` is one ``error:`` line and its exit code."""
        try:
            task, cfg, options = self.parse(argv, prog)
            launch_tool(cfg, self.folder, self.probe, options, task=task)
        except BaseTrainerError as error:
            exit_with(error)


def tool_parser(prog, description: str, settings, title: str, examples=(), task="classification"):
    """The parser of the task named, described as the tool, with ``settings``' flags under ``title`` and the tool's
    ``examples`` (command lines after the program's name) in place of the task's: those that name
    ``--task text`` for the text task, the others for classification."""
    parser = task_parser(task, prog)
    parser.description = description
    add_setting_flags(parser, settings, {settings_group(settings): title})
    precedence = parser.epilog.partition("\nexamples:\n")[0]
    examples = [example.replace("--task text ", "" if prog and prog.endswith("--task text") else "--task text ")
                for example in examples if ("--task text" in example) == (task == "text")]
    parser.epilog = "\n".join([precedence, "", "examples:", *(f"  %(prog)s {example}" for example in examples)])
    return parser


def settings_group(settings) -> str:
    """The group the tool's settings declare (one for all of them)."""
    return next(iter(settings)).group


def parse_tool_command(argv, prog, description: str, settings, title: str, examples=(), task="classification"):
    """``(cfg, options)``: the task's checked config and the tool's flags (a dict), from ``argv``. ``--help``
    prints both sets of flags; a bad flag value is one line and exit code 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    own = ArgumentParser(prog=prog, add_help=False, allow_abbrev=False)
    own.add_argument("-h", "--help", action="store_true")
    add_setting_flags(own, settings, checked=True)
    options, rest = own.parse_known_args(argv)
    if options.help:
        tool_parser(prog, description, settings, title, examples, task=task).print_help()
        sys.exit(0)
    return task_pipeline(task)[2](rest, prog), {name: getattr(options, name) for name in settings.names()}


def launch_tool(cfg, folder: str, probe, options: dict, task: str = "classification") -> None:
    """Runs ``probe(trainer, options, out_dir)`` in every process ``cfg`` asks for, on the task's trainer that
    writes to ``<work_dir>/<folder>``."""
    task_pipeline(task)[1](cfg)
    launch(probe_trainer, num_gpus_per_machine=len(cfg.gpu_id), num_machines=cfg.num_machines,
           machine_rank=cfg.machine_rank, dist_url=cfg.dist_url, distributed=cfg.distributed,
           args=(cfg, folder, probe, options, task), timeout=cfg.dist_timeout)


def probe_trainer(cfg, folder: str, probe, options: dict, task: str = "classification"):
    """What every process runs: builds the trainer in ``<work_dir>/<folder>`` (no trackers: the tool is no
    training run) and probes it; on failure the main process removes the folders it made."""
    out_dir = os.path.join(cfg.work_dir, folder)
    made = _topmost_missing(out_dir)
    tool_cfg = copy.deepcopy(cfg)
    tool_cfg.work_dir, tool_cfg.loggers = out_dir, []
    try:
        trainer = task_pipeline(task)[0](tool_cfg)
        result = probe(trainer, options, out_dir)
    except BaseException:
        if made is not None and comm.is_main_process():
            set_logger(level="info")  # closes train.log before its folder goes
            shutil.rmtree(made, ignore_errors=True)
        raise
    if comm.is_main_process() and os.path.isdir(trainer.model_dir) and not os.listdir(trainer.model_dir):
        os.rmdir(trainer.model_dir)  # the trainer's checkpoint folder: a probe saves none
    return result


def _topmost_missing(path: str):
    """The outermost folder of ``path`` that does not exist yet (None when ``path`` exists)."""
    missing = None
    path = os.path.abspath(path)
    while not os.path.exists(path):
        missing, path = path, os.path.dirname(path)
    return missing

