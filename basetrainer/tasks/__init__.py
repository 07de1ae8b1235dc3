"""Ready-made training pipelines built on EngineTrainer (they import torchvision; ``import basetrainer`` does not).

- :mod:`basetrainer.tasks.classification`: image classification on ImageFolder data, the
  pipeline of ``examples/example.py`` and of the ``basetrainer train`` command.
- :mod:`basetrainer.tasks.detection`: object detection on COCO data, ``basetrainer train --task detection``.
- :mod:`basetrainer.tasks.text`: fine-tuning a pretrained Hugging Face transformer (causal LM or sequence
  classifier, LoRA through peft), ``basetrainer train --task text``.
- :mod:`basetrainer.tasks.common`: what the tasks share instead of copying it (the keys every task reads, the
  command line's layout, the run's start-up, launch and error handling, a trainer that only predicts).
- Above every task: :mod:`basetrainer.tasks.shards` (``basetrainer shards``: any task's data written as shards) and
  :mod:`basetrainer.tasks.reference` (the config files and the configuration reference, written from every task's
  settings).
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
