"""``basetrainer lr-find``: the learning-rate range test on the classification task, with its flags and config.

::

    basetrainer lr-find --train_data D/train --net_type resnet18 batch_size=64
    basetrainer lr-find --min_lr 1e-6 --max_lr 1 --num_steps 50 optim_type=AdamW

Writes ``<work_dir>/lr_find/lr_find.csv`` (step, lr, loss, smoothed loss) and ``lr_find.png`` (loss against lr,
the suggestion and the lowest point marked), and prints the suggestion as a ready override, ``lr=<value>``, on the last line.
"""
import os

from .command import ToolCommand
from .range_test import lr_find
from .tool_settings import LR_FIND_SETTINGS, check_lr_find
from .reports import plot_lr_find, write_csv

DESCRIPTION = ("The learning-rate range test (Smith; fastai's and Lightning's lr_find): trains the task's model\n"
               "for num_steps optimizer steps while the lr grows exponentially from min_lr to max_lr, stops once\n"
               "the loss diverges, and suggests the lr where the loss falls fastest before its lowest point.\n"
               "It takes every flag and KEY=VALUE of 'basetrainer train' (the model, optimizer and data are the\n"
               "training run's). It writes WORK_DIR/lr_find/lr_find.csv and lr_find.png, and prints\n"
               "lr=<suggestion> last.")
EXAMPLES = ("--input_size 8 8 --num_steps 50    # the bundled digits",
            "--train_data D/train --net_type resnet18 optim_type=AdamW --max_lr 1",
            "--task text lora.r=8 --num_steps 30    # the bundled texts and tiny model")
TITLE = "the range test"


def probe(trainer, options: dict, out_dir: str):
    """Runs the range test on ``trainer``; the main process writes the CSV and the PNG and prints the result."""
    result = lr_find(trainer, **options)
    if trainer.is_main_process:
        table = write_csv(result.rows(), os.path.join(out_dir, "lr_find.csv"))
        picture = plot_lr_find(result, os.path.join(out_dir, "lr_find.png"))
        print(result.summary())
        print(f"wrote {table} and {picture}")
        if result.override:
            print(result.override)
    return result


COMMAND = ToolCommand("lr_find", DESCRIPTION, LR_FIND_SETTINGS, TITLE, EXAMPLES, check_lr_find, probe)
get_parser, main = COMMAND.get_parser, COMMAND.main
