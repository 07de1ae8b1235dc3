"""What every task's command line shares: the parser's layout and the way a config is read from it.

A task's ``get_parser`` and ``parse_config`` (:mod:`basetrainer.tasks.classification.config`,
:mod:`basetrainer.tasks.detection.config`) name only what is the task's own: its settings, its help
text and examples, its default length and its checks. Settings come from, highest first: ``key=value``
overrides, flags typed on the command line, the YAML file of ``-c``, and the declared defaults.
"""
import argparse
import sys

from ...config import add_override_arguments
from ...config.command_line import merged_config
from ...config.flags import ArgumentParser, add_setting_flags
from ...config.overrides import overrides_first


class TaskHelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows the defaults, and the description and the examples as written by the task."""


def task_parser(settings, groups, *, prog, description, config_file, examples, notes=()):
    """A flag for the keys of ``settings`` people type most (grouped by ``groups``), every key's default, and
    ``KEY=VALUE`` for any key; the help ends with the precedence, ``notes`` and one line per example."""
    epilog = [f"Any key of {config_file} can be set as KEY=VALUE, anywhere on the command line.",
              "Precedence: KEY=VALUE, then flags, then the -c YAML file, then the defaults above.",
              *notes, "", "examples:", *(f"  %(prog)s {example}" for example in examples)]
    parser = ArgumentParser(prog=prog, formatter_class=TaskHelpFormatter, description=description,
                            epilog="\n".join(epilog))
    add_setting_flags(parser, settings, groups)
    return add_override_arguments(parser)


def parse_task_config(argv, parser, settings, *, default_num_epochs, check):
    """The config ``parser`` reads from ``argv`` (default ``sys.argv[1:]``), ``num_epochs`` set to
    ``default_num_epochs`` when neither it nor ``max_iters`` is, checked by ``check(cfg, sources)``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    argv = overrides_first(argv, set(settings.names()))  # --gpu_id 0 1 strategy=fsdp
    # Intermixed: key=value overrides may come before, between or after the flags.
    cfg, sources = merged_config(parser.parse_intermixed_args(argv), parser=parser, strict=True, argv=argv,
                                 schema=settings)
    if cfg.num_epochs is None and cfg.max_iters is None:
        cfg.num_epochs = default_num_epochs
    check(cfg, sources)
    return cfg
