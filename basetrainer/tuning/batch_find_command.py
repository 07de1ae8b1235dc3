"""``basetrainer batch-find``: the batch-size finder on the classification task, with its flags and config.

::

    basetrainer batch-find --train_data D/train --net_type resnet18 --input_size 224 224
    basetrainer batch-find --max_memory 4096 --first_size 16

Prints a table of the sizes tried (fits, peak memory, samples/s), writes it to
``<work_dir>/batch_find/batch_find.csv``, and prints the recommended size as a ready override on the last line,
``batch_size=<size>`` with the lr for it (``'lr_scaling={rule: linear, base_batch_size: <the config's>}'``
unless the run scales its lr already).
"""
import os

from .batch_size import find_batch_size
from .command import ToolCommand
from .tool_settings import BATCH_FIND_SETTINGS, check_batch_find
from .reports import format_table, write_csv

DESCRIPTION = ("The batch-size finder (Lightning's scale_batch_size): the largest batch per process that fits,\n"
               "by doubling from first_size then bisecting: on CUDA until out of memory, on the CPU within\n"
               "max_memory of peak memory growth; and the samples/s of each size. It takes every flag and\n"
               "KEY=VALUE of 'basetrainer train'. It prints the sizes tried, writes them to\n"
               "WORK_DIR/batch_find/batch_find.csv, and prints batch_size=<size> last: the size after which\n"
               "samples/s stop growing by more than 10%, with lr_scaling so that the lr follows the batch.")
EXAMPLES = ("--input_size 8 8 --max_memory 512    # the bundled digits",
            "--train_data D/train --net_type resnet18 --input_size 224 224 --gpu_id 0",
            "--task text --max_seq_len 512 --gpu_id 0")
TITLE = "the batch-size finder"
CAUTION = ("A larger batch trains more samples per second but can end at a lower accuracy in the same epochs, lr "
           "scaled or not (the digits: 98.05% at 64, 87.74% at 256); which size reaches your target soonest is "
           "what 'basetrainer study --batch-sizes ...' measures (docs: the batch-size guide).")
COLUMNS = [("batch_size", "batch size", "{}"), ("fits", "fits", "{}"), ("peak_memory_mib", "peak MiB", "{:.0f}"),
           ("samples_per_second", "samples/s", "{:.1f}"), ("note", "note", "{}")]


def probe(trainer, options: dict, out_dir: str):
    """Runs the finder on ``trainer``; the main process prints the table and the result and writes the CSV."""
    result = find_batch_size(trainer, **options)
    if trainer.is_main_process:
        table = write_csv(result.rows(), os.path.join(out_dir, "batch_find.csv"))
        budget = "CUDA's own limit" if result.budget_mib is None else f"{result.budget_mib:.0f} MiB"
        print(f"memory budget per process: {budget}")
        print(format_table(result.rows(), COLUMNS))
        print(result.summary())
        print(f"{result.lr_note}. {CAUTION}")
        print(f"wrote {table}")
        print(result.override)
    return result


COMMAND = ToolCommand("batch_find", DESCRIPTION, BATCH_FIND_SETTINGS, TITLE, EXAMPLES, check_batch_find, probe)
get_parser, main = COMMAND.get_parser, COMMAND.main
