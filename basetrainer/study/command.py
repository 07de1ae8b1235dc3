"""``basetrainer study``: one training run per batch size, the lr scaled with the global batch, compared by the
time each takes to reach a target.

::

    basetrainer study --batch-sizes 16 32 64 128 256 512 --base-batch-size 64 --target-value 98
    basetrainer study --batch-sizes 32 64 --processes 2 --rule sqrt --base-batch-size 64 \\
        -- optim_type=AdamW lr=1e-3
    basetrainer study --batch-sizes 64 128 --rule none --script train.py -- -c my.yaml num_epochs=5
"""
import argparse
import sys

from ..config.flags import ArgumentParser, add_setting_flags
from ..errors import BaseTrainerError
from ..utils.console import exit_with
from .plan import STUDY_SETTINGS, StudyPlan
from .runner import run_study

USAGE = "%(prog)s --batch-sizes N [N ...] [options] [-- TRAINING_ARGUMENT ...]"


def get_parser(prog=None):
    """The study's flags; what follows ``--`` goes to every run's training command unchanged."""
    class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
        """Shows the defaults, and the description and the examples as written here."""

    parser = ArgumentParser(
        prog=prog, usage=USAGE, formatter_class=HelpFormatter,
        description="Train once per batch size, each run in a process of its own under --out (run_bs<N>/), with the "
                    "same seed, data and target and the lr scaled by --rule from --base-batch-size, then compare "
                    "them: study.csv and study.md (global batch, lr, samples/s, seconds per epoch, epoch, step and "
                    "training seconds to the target, best and final value, peak memory) and study.png (time to "
                    "target against the batch; the metric against training time, one curve per run).",
        epilog="After --: the training command's flags and KEY=VALUE overrides, the same for every run (python -m "
               "basetrainer train, or --script). The study sets batch_size, work_dir, lr_scaling, target and, with "
               "--processes, distributed and gpu_id itself.\n"
               "Started again with the same settings, a study keeps the runs it finished (their rows are the same) "
               "and runs the others; a run cut short is run again from scratch. A run that fails (out of memory) "
               "is a row that says so, and the others go on.\n"
               "\n"
               "examples:\n"
               "  %(prog)s --batch-sizes 16 32 64 128 256 512 --base-batch-size 64 --target-value 98\n"
               "  %(prog)s --batch-sizes 32 64 --processes 2 --rule sqrt --base-batch-size 64 \\\n"
               "      -- optim_type=AdamW lr=0.001\n"
               "  %(prog)s --batch-sizes 64 128 --rule none --script train.py -- -c my.yaml num_epochs=5",
    )
    add_setting_flags(parser, STUDY_SETTINGS, checked=True)
    parser.add_argument("train_args", nargs="*", metavar="TRAINING_ARGUMENT",
                        help="after --: the training command's flags and KEY=VALUE overrides")
    return parser


def parse_plan(argv, prog=None) -> StudyPlan:
    """The checked plan for ``argv``: the study's flags, then ``--`` and the training arguments."""
    settings = vars(get_parser(prog).parse_args(list(argv)))
    return StudyPlan.from_settings(settings, settings.pop("train_args"), source="from the command line")


def main(argv=None, prog=None):
    """Command-line entry point: a ``BaseTrainerError`` (bad input, before anything is written; or the study
    stopped) becomes one ``error:`` line and its exit code."""
    try:
        run_study(parse_plan(sys.argv[1:] if argv is None else argv, prog))
    except BaseTrainerError as error:
        exit_with(error)


if __name__ == "__main__":
    main()
