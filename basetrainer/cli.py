"""The ``basetrainer`` command.

::

    basetrainer --version
    basetrainer train -c configs/config.yaml --train_data D/train --test_data D/val
    basetrainer train --help
    basetrainer train -c configs/config.yaml --ray 4 --ray_max_failures 3   # on a Ray cluster
    basetrainer train --task detection --num_epochs 8   # a detector on COCO data (the digit scenes)
    basetrainer predict --task detection --checkpoint M --images D --annotations A --out results.json
    basetrainer lr-find --train_data D/train          # the lr range test: prints a suggested lr=
    basetrainer batch-find --train_data D/train --gpu_id 0   # the largest batch that fits
    basetrainer lr-find --task text lora.r=8            # the text task's (--help: its flags)
    basetrainer export work_dirs/classification/model/last.pth --format onnx --out model.onnx
    basetrainer predict --checkpoint work_dirs/classification/model/model_final.pth --data D --out p.csv
    # fine-tune a pretrained transformer (a local folder or a hub name) with LoRA:
    basetrainer train --task text lora.r=8
    basetrainer export work_dirs/text/model/model_final --out merged/   # the adapter merged
    basetrainer shards --image-folder D/train --out shards/train   # then train_data=shards/train

``train`` runs :mod:`basetrainer.tasks.classification`, the pipeline of ``examples/example.py``, with the same
flags and config keys (with ``--task detection``, :mod:`basetrainer.tasks.detection`, the pipeline of
``examples/detection.py``); ``lr-find`` and ``batch-find`` probe its trainer with them (:mod:`basetrainer.tuning`);
``shards`` writes data as shards (:mod:`basetrainer.tasks.shards`). ``export`` writes a classifier that ``train``
saved as an ONNX, TorchScript or torch.export file (a detector as ONNX, :mod:`basetrainer.tasks.detection.export`),
checks it against torch (see :mod:`basetrainer.export`) and exits 1 when the check fails; with
``--out *.pth`` (``--format pth``) it writes the weights as one plain state_dict, also from a
sharded checkpoint directory (FSDP), for any model. Without ``--format``, ``--out``'s suffix
says which (``.pth``, ``.ts``, ``.pt2``; ONNX otherwise). From a ``save_pretrained`` folder (a text run's
``model/model_final``) it writes the model again as one, a LoRA adapter merged into its base weights
(:mod:`basetrainer.tasks.text.save`), checked against the folder's logits.
"""
import argparse
import importlib
import os
import sys
from functools import partial

from . import __version__
from .config.flags import ArgumentParser, add_setting_flags
from .config.kinds import Integer
from .config.schema import Schema, Setting
from .errors import BaseTrainerError, CheckpointError, ConfigError, DataError
from .tasks import TASKS, take_task
from .utils.console import exit_with
from .utils.file_utils import check_writable_file

# basetrainer.export.FORMATS, spelt out so that `basetrainer --help` does not import torch
EXPORT_FORMATS = ("onnx", "torchscript", "exported-program")
WEIGHTS_FORMAT = "pth"  # the weights alone, consolidated: any model, no check
FORMAT_OF_SUFFIX = {".pth": WEIGHTS_FORMAT, ".ts": "torchscript", ".pt2": "exported-program", ".onnx": "onnx"}

PREDICT_SETTINGS = Schema([
    Setting("topk", Integer(minimum=1), 1, "classes per image, most likely first", flag={}),
    Setting("batch_size", Integer(minimum=1, maximum=4096), 64, "images per batch", unit="images", flag={}),
    Setting("gpu_id", Integer(minimum=0), None, "the GPU to use (null: the CPU)", nullable=True, flag={}),
])
EXPORT_SETTINGS = Schema([
    Setting("batch", Integer(minimum=1, maximum=64), 1,
            "batch size of the example input (the check runs another size: the batch is dynamic)", unit="images",
            flag={}),
])


# Commands that parse their own flags (``basetrainer lr-find --help``), name -> what it does (TOOL_MODULES: its module).
TOOLS = {
    "lr-find": "the learning-rate range test: loss against lr, and a suggested lr= (basetrainer lr-find --help)",
    "batch-find": "the largest batch per process that fits, and where throughput stops growing "
                  "(basetrainer batch-find --help)",
    "study": "one run per batch size, lr scaled, with the time to a target accuracy (basetrainer study --help)",
    "shards": "write data as shards to stream from a folder or object storage (basetrainer shards --help)",
}
# The module of each task's parser (TASKS, in basetrainer.tasks, names what ``basetrainer train --task NAME`` runs).
TASK_PARSERS = {task: f"{module}.config" for task, module in TASKS.items()}
PREDICT_TASKS = ("classification", "detection")  # the tasks basetrainer predict runs the models of
TASK_TOOLS = ("lr-find", "batch-find")  # the tools that take --task (classification or text)
TOOL_MODULES = {"lr-find": "basetrainer.tuning.lr_find_command", "batch-find": "basetrainer.tuning.batch_find_command",
                "study": "basetrainer.study.command", "shards": "basetrainer.tasks.shards"}


def get_parser():
    parser = ArgumentParser(prog="basetrainer", description="basetrainer: a PyTorch training engine.")
    parser.add_argument("--version", action="version", version=f"basetrainer {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("train", add_help=False,
                        help="train an image classifier on ImageFolder data, with --task detection an object "
                             "detector on COCO data, or with --task text fine-tune a pretrained transformer "
                             "(basetrainer train [--task detection|text] --help); with --ray N "
                             "[--ray_max_failures K], in N Ray Train workers")
    for name, text in TOOLS.items():
        commands.add_parser(name, add_help=False, help=text)
    export = commands.add_parser(
        "export", help="write a trained classifier as an ONNX, TorchScript or torch.export file, a detector as "
                       "ONNX, or a fine-tuned transformer as a merged save_pretrained folder, checked",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Write a classifier that basetrainer train saved as an ONNX, TorchScript or torch.export file,\n"
                    "run it on an example batch of another size and compare its outputs with torch's: the check\n"
                    "line says how close they are, and the exit code is 1 when they differ. With an --out ending in\n"
                    ".pth (--format pth) it writes the training weights as one plain state_dict instead, for any\n"
                    "model and also from a sharded checkpoint directory (FSDP), without a check. A detection run's\n"
                    "model is written as ONNX only (an image in; boxes, scores, labels out), checked on an image of\n"
                    "the run. A save_pretrained folder (a text run's model/model_final) is written as one again to\n"
                    "the folder --out, a LoRA adapter merged into its base weights, checked on a prompt's logits.",
        epilog="examples:\n"
               "  %(prog)s work_dirs/classification/model/last.pth --out model.onnx\n"
               "  %(prog)s work_dirs/classification/model/model_final.pth --out model.ts --batch 4\n"
               "  %(prog)s work_dirs/classification/model/last --out weights.pth    # a sharded checkpoint\n"
               "  %(prog)s work_dirs/detection/model/model_final.pth --out detector.onnx\n"
               "  %(prog)s work_dirs/text/model/model_final --out merged/    # save_pretrained, LoRA merged")
    export.add_argument("checkpoint", help="a model file of a run: last.pth, best_model_*.pth or model_final.pth, "
                                           "or a sharded checkpoint directory (model/last)")
    export.add_argument("--format", choices=(*EXPORT_FORMATS, WEIGHTS_FORMAT), default=None,
                        help="what to write (default: from --out's suffix: .pth pth, .ts torchscript, "
                             ".pt2 exported-program, else onnx)")
    export.add_argument("--out", required=True, help="the file to write, e.g. model.onnx, model.ts, model.pt2, "
                                                     "weights.pth")
    add_setting_flags(export, EXPORT_SETTINGS, checked=True)
    predict = commands.add_parser(
        "predict", help="a trained classifier's top classes for every image of a folder, as CSV",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run a classifier that basetrainer train saved on every image of a folder (or of an ImageFolder\n"
                    "tree), with the input size, normalisation and class names of the run that saved it, and write\n"
                    "one CSV row per image: its path under --data, then its --topk most likely classes, each with\n"
                    "its softmax score.",
        epilog="examples:\n"
               "  %(prog)s --checkpoint work_dirs/classification/model/model_final.pth \\\n"
               "      --data photos/ --out p.csv\n"
               "  %(prog)s --checkpoint work_dirs/classification/model/last.pth \\\n"
               "      --data data/digits/val --out p.csv --topk 3")
    predict.add_argument("--task", choices=PREDICT_TASKS, default="classification",
                         help="detection: a detector's boxes on the images of a COCO annotation file, with flags of its "
                              "own (basetrainer predict --task detection --help)")
    predict.add_argument("--checkpoint", required=True,
                         help="a model file of a classification run: last.pth, best_model_*.pth or model_final.pth")
    predict.add_argument("--data", required=True, help="a folder of images, or an ImageFolder tree")
    predict.add_argument("--out", required=True, help="the CSV file to write, e.g. predictions.csv")
    add_setting_flags(predict, PREDICT_SETTINGS, checked=True)
    return parser


def train_parser(task="classification"):
    """What ``basetrainer train [--task TASK] --help`` prints: the task's parser, and the flags the command itself
    takes before the task reads the rest (``--task``, ``--ray``, ``--ray_max_failures``)."""
    prog = "basetrainer train" + ("" if task == "classification" else f" --task {task}")
    parser = importlib.import_module(TASK_PARSERS[task]).get_parser(prog)
    command = parser.add_argument_group("the train command")
    command.add_argument("--task", choices=tuple(TASKS), default="classification",
                         help="what to train: an image classifier on ImageFolder data, an object detector on COCO "
                              "data, or a pretrained transformer (text) fine-tuned (each task has flags of its own: "
                              "basetrainer train --task detection --help)")
    command.add_argument("--ray", type=int, metavar="N", default=argparse.SUPPRESS,
                         help="train in N Ray Train workers on the Ray cluster of RAY_ADDRESS (a local one without "
                              "it), not in processes of its own; needs pip install \"basetrainer[ray]\"")
    command.add_argument("--ray_max_failures", type=int, metavar="K", default=argparse.SUPPRESS,
                         help="how often Ray restarts the run of --ray N after a worker died, resuming from its "
                              "last checkpoint (default: 0)")
    return parser


def tool_parser(name, task="classification"):
    """What ``basetrainer NAME [--task TASK] --help`` prints for a tool that takes ``--task`` (lr-find, batch-find)."""
    prog = f"basetrainer {name}" + ("" if task == "classification" else f" --task {task}")
    return importlib.import_module(TOOL_MODULES[name]).COMMAND.get_parser(prog, task=task)


# The parsers of the commands with a --task, called without arguments by the reference's sphinx-argparse directives.
train_detection_parser, train_text_parser = partial(train_parser, "detection"), partial(train_parser, "text")
lr_find_text_parser, batch_find_text_parser = partial(tool_parser, "lr-find", "text"), partial(tool_parser,
                                                                                                "batch-find", "text")


def command_parsers() -> dict:
    """Every ``basetrainer`` command and the parser whose ``--help`` it prints: the command-line reference must show
    each of their flags (the documentation build checks it)."""
    top = get_parser()
    commands = next(action for action in top._actions if isinstance(action, argparse._SubParsersAction)).choices
    parsers = {"basetrainer": top}
    parsers.update({"basetrainer train" + ("" if task == "classification" else f" --task {task}"): train_parser(task)
                    for task in TASKS})
    parsers.update({f"basetrainer {name}": importlib.import_module(module).get_parser(f"basetrainer {name}")
                    for name, module in TOOL_MODULES.items()})
    parsers.update({f"basetrainer {name} --task text": tool_parser(name, "text") for name in TASK_TOOLS})
    parsers.update({"basetrainer export": commands["export"], "basetrainer predict": commands["predict"]})
    from .tasks.detection.predict import get_parser as detection_predict_parser

    parsers["basetrainer predict --task detection"] = detection_predict_parser("basetrainer predict --task detection")
    return parsers


def predict(args):
    """``basetrainer predict``: one CSV row per image; a BaseTrainerError is one line and its exit code."""
    from .tasks.classification.predict import predict_images

    try:
        check_writable_file(args.out, "--out")
        rows = predict_images(args.checkpoint, args.data, args.out, topk=args.topk, batch_size=args.batch_size,
                              gpu_id=args.gpu_id)
    except BaseTrainerError as error:
        exit_with(error)
    except OSError as error:  # the disk filled, or the folder went away, while writing
        exit_with(DataError(f"cannot write {args.out}: {error.strerror or error}; choose another --out"))
    print(f"wrote {rows} predictions to {args.out}")


def export(args):
    """``basetrainer export``: prints which weights it exports and the check line; exits 1 if the check fails."""
    from .export import export_model, write_weights
    from .export.from_checkpoint import classifier_from_saved, read_saved_model

    if is_pretrained_folder(args.checkpoint):
        return export_pretrained(args)
    kind = args.format or FORMAT_OF_SUFFIX.get(os.path.splitext(args.out)[1].lower(), "onnx")
    try:
        check_writable_file(args.out, "--out")
        if kind == WEIGHTS_FORMAT:
            weights = write_weights(args.checkpoint, args.out)
            print(f"wrote {args.out}: the {len(weights)} tensors of the training weights in {args.checkpoint}, "
                  f"consolidated (torch.load(path, weights_only=True), then load_state_dict on the plain model)")
            return
        saved = read_saved_model(args.checkpoint)
        if "task_type" in saved.config:  # a text run's: its model is saved as a save_pretrained folder
            final = os.path.join(os.path.dirname(os.path.abspath(args.checkpoint)), "model_final")
            raise CheckpointError(f"{args.checkpoint} is a text run's checkpoint: export the save_pretrained folder "
                                  f"the run wrote, basetrainer export {final} --out DIR (the adapter merged)")
        print(f"exporting {saved.description}")
        if saved.is_detector:
            from .tasks.detection.export import export_detector

            result = export_detector(saved, args.out, format=kind)
        else:
            loaded = classifier_from_saved(saved)
            result = export_model(loaded.model, loaded.example_input(args.batch), args.out, format=kind)
    except BaseTrainerError as error:
        exit_with(error)
    except OSError as error:  # the disk filled, or the folder went away, while writing
        exit_with(CheckpointError(f"cannot write {args.out}: {error.strerror or error}; choose another --out"))
    print(f"wrote {result.path}")
    print(result)
    if not result.passed:
        sys.exit(1)


def is_pretrained_folder(path) -> bool:
    """Whether ``path`` is a folder ``save_pretrained`` wrote (a text run's ``model/model_final``)."""
    return os.path.isdir(path) and any(os.path.isfile(os.path.join(path, name))
                                       for name in ("config.json", "adapter_config.json"))


def export_pretrained(args):
    """``basetrainer export <save_pretrained folder> --out DIR``: the model (an adapter merged into its base
    weights) written to DIR with save_pretrained, and the check line; exits 1 when the logits differ."""
    from .tasks.text.save import CHECK_TOLERANCE
    from .tasks.text.save import export_pretrained as merge

    if args.format is not None:
        exit_with(ConfigError(f"--format {args.format}: {args.checkpoint} is a save_pretrained folder, written as "
                              f"one again (merged); leave --format out"))
    try:
        what, difference = merge(args.checkpoint, args.out)
    except BaseTrainerError as error:
        exit_with(error)
    except OSError as error:
        exit_with(CheckpointError(f"cannot write {args.out}: {error.strerror or error}; choose another --out"))
    passed = difference <= CHECK_TOLERANCE
    print(f"wrote {args.out}: {what}, with its tokenizer (save_pretrained; AutoModel*.from_pretrained loads it)")
    print(f"check: the written model's logits {'equal' if passed else 'differ from'} {args.checkpoint}'s on a "
          f"prompt: max abs diff {difference:.2e} (tolerance {CHECK_TOLERANCE:g})")
    if not passed:
        sys.exit(1)


def train_task(arguments):
    """``(task, the other arguments)``: ``--task NAME`` or ``--task=NAME`` taken out of ``train``'s (or
    ``predict``'s) arguments (classification without it); an unknown task ends the command in one line."""
    task, rest = take_task(arguments)
    if task not in TASKS:
        exit_with(ConfigError(f"--task {task!r}: choose one of {', '.join(TASKS)}"))
    return task, rest


def ray_arguments(arguments):
    """``(workers, max_failures, the other arguments)``: ``--ray N`` and ``--ray_max_failures K`` taken out of
    ``train``'s arguments (0 and 0 without them); a value that is no whole number ends the command in one line."""
    values, rest, index = {"--ray": 0, "--ray_max_failures": 0}, [], 0
    while index < len(arguments):
        name, _, inline = arguments[index].partition("=")
        if name not in values:
            rest.append(arguments[index])
            index += 1
            continue
        text = inline if inline else (arguments[index + 1:index + 2] or [""])[0]
        if not text.isdigit() or (name == "--ray" and int(text) < 1):
            exit_with(ConfigError(f"{name} {text!r}: give a whole number (--ray: how many workers, 1 or more)"))
        values[name] = int(text)
        index += 1 if inline else 2
    if values["--ray_max_failures"] and not values["--ray"]:
        exit_with(ConfigError("--ray_max_failures: it says how often Ray restarts a run of --ray N; add --ray N"))
    return values["--ray"], values["--ray_max_failures"], rest


def train_on_ray(task, arguments, prog, workers, max_failures):
    """``basetrainer train ... --ray N``: the task's config parsed and checked here, then its training in N Ray
    Train workers (:func:`basetrainer.integrations.ray.train_task`); a refusal is one line and its exit code."""
    from .integrations import ray as on_ray
    from .utils.log import set_logger

    try:
        cfg = task.parse_config(arguments, prog)
        set_logger(level="info")
        on_ray.train_task(task, cfg, workers, max_failures)
    except BaseTrainerError as error:
        exit_with(error)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "train":
        # The pipeline parses its own flags, so that precedence is exact; --help lists the command's too.
        task, arguments = train_task(argv[1:])
        if {"-h", "--help"} & set(arguments):
            train_parser(task).print_help()
            sys.exit(0)
        prog = "basetrainer train" + ("" if task == "classification" else f" --task {task}")
        ray_workers, max_failures, arguments = ray_arguments(arguments)
        if ray_workers:
            return train_on_ray(importlib.import_module(TASKS[task]), arguments, prog, ray_workers, max_failures)
        return importlib.import_module(TASKS[task]).main(arguments, prog=prog)
    if argv and argv[0] in TOOLS:
        return importlib.import_module(TOOL_MODULES[argv[0]]).main(argv[1:], prog=f"basetrainer {argv[0]}")
    if argv and argv[0] == "predict":
        task, arguments = train_task(argv[1:])
        if task not in PREDICT_TASKS:
            exit_with(ConfigError(f"--task {task}: basetrainer predict takes {' or '.join(PREDICT_TASKS)}; a text "
                                  f"run's model_final/ is a save_pretrained folder: generate with transformers"))
        if task == "detection":  # its own flags: the images and annotation file of COCO data, a results file
            from .tasks.detection.predict import main as predict_detections

            return predict_detections(arguments, prog="basetrainer predict --task detection")
        argv = ["predict", *arguments]  # --task classification: the classifier's flags
    parser = get_parser()
    args = parser.parse_args(argv)  # --version, --help and unknown commands exit here
    if args.command == "export":
        return export(args)
    if args.command == "predict":
        return predict(args)
    parser.error(f"give a command: train, {', '.join(TOOLS)}, export or predict (basetrainer train --help)")


if __name__ == "__main__":
    main()
