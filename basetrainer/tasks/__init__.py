"""Ready-made training pipelines built on EngineTrainer (they import torchvision; ``import basetrainer`` does not).

- :mod:`basetrainer.tasks.classification`: image classification on ImageFolder data, the
  pipeline of ``examples/example.py`` and of the ``basetrainer train`` command.
- :mod:`basetrainer.tasks.detection`: object detection on COCO data, ``basetrainer train --task detection``.
- :mod:`basetrainer.tasks.text`: fine-tuning a pretrained Hugging Face transformer (causal LM or sequence
  classifier, LoRA through peft), ``basetrainer train --task text``.
- What the tasks share instead of copying it: :mod:`basetrainer.tasks.command_line` (the parser's layout and
  reading a config from it) and :mod:`basetrainer.tasks.startup` (the run's folders and first log lines, the
  clean-up of a run refused at start-up, the launch, the command's error handling).
"""

# What ``basetrainer train --task NAME`` runs (``lr-find`` and ``batch-find`` take ``--task`` too): each module has
# main(argv, prog) and parse_config(argv, prog).
TASKS = {"classification": "basetrainer.tasks.classification", "detection": "basetrainer.tasks.detection",
         "text": "basetrainer.tasks.text"}


def take_task(arguments):
    """``(task, the other arguments)``: ``--task NAME`` or ``--task=NAME`` taken out of ``arguments``
    (classification without it); the name as given, which the caller checks against ``TASKS``."""
    for index, argument in enumerate(arguments):
        if argument == "--task" or argument.startswith("--task="):
            task = argument.partition("=")[2] if "=" in argument else (arguments[index + 1:index + 2] or [""])[0]
            return task, [*arguments[:index], *arguments[index + (1 if "=" in argument else 2):]]
    return "classification", list(arguments)
