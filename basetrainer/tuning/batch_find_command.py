"""``basetrainer batch-find``: the batch-size finder on the classification task, with its flags and config.

::

    basetrainer batch-find --train_data D/train --net_type resnet18 --input_size 224 224
    basetrainer batch-find --max_memory 4096 --first_size 16

Prints a table of the sizes tried (fits, peak memory, samples/s), writes it to
``<work_dir>/batch_find/batch_find.csv``, and prints the recommended size as a ready override,
``batch_size=<size>``, on the last line.
"""
import os

from ..errors import BaseTrainerError, exit_with
from .batch_size import find_batch_size
from .command import launch_tool, parse_tool_command, tool_parser
from .tool_settings import BATCH_FIND_SETTINGS, check_batch_find
from .reports import format_table, write_csv

DESCRIPTION = ("The batch-size finder (Lightning's scale_batch_size): the largest batch per process that fits,\n"
               "by doubling from first_size then bisecting: on CUDA until out of memory, on the CPU within\n"
               "max_memory of peak memory growth; and the samples/s of each size. It takes every flag and\n"
               "KEY=VALUE of 'basetrainer train'. It prints the sizes tried, writes them to\n"
               "WORK_DIR/batch_find/batch_find.csv, and prints batch_size=<size> last: the size after which\n"
               "samples/s stop growing by more than 10%.")
EXAMPLES = ("--input_size 8 8 --max_memory 512    # the bundled digits",
            "--train_data D/train --net_type resnet18 --input_size 224 224 --gpu_id 0")
TITLE = "the batch-size finder"
COLUMNS = [("batch_size", "batch size", "{}"), ("fits", "fits", "{}"), ("peak_memory_mib", "peak MiB", "{:.0f}"),
           ("samples_per_second", "samples/s", "{:.1f}"), ("note", "note", "{}")]


def get_parser(prog=None):
    """The command line: the task's flags and overrides, and the finder's own (also for the docs)."""
    return tool_parser(prog, DESCRIPTION, BATCH_FIND_SETTINGS, TITLE, EXAMPLES)


def probe(trainer, options: dict, out_dir: str):
    """Runs the finder on ``trainer``; the main process prints the table and the result and writes the CSV."""
    result = find_batch_size(trainer, **options)
    if trainer.is_main_process:
        table = write_csv(result.rows(), os.path.join(out_dir, "batch_find.csv"))
        budget = "CUDA's own limit" if result.budget_mib is None else f"{result.budget_mib:.0f} MiB"
        print(f"memory budget per process: {budget}")
        print(format_table(result.rows(), COLUMNS))
        print(result.summary())
        print(f"wrote {table}")
        print(result.override)
    return result


def main(argv=None, prog=None):
    """Command-line entry point; a ``BaseTrainerError`` is one ``error:`` line and its exit code."""
    try:
        cfg, options = parse_tool_command(argv, prog, DESCRIPTION, BATCH_FIND_SETTINGS, TITLE, EXAMPLES)
        options = check_batch_find(options, "from the command line")
        launch_tool(cfg, "batch_find", probe, options)
    except BaseTrainerError as error:
        exit_with(error)
