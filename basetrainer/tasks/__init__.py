"""Ready-made training pipelines built on EngineTrainer (they import torchvision; ``import basetrainer`` does not).

- :mod:`basetrainer.tasks.classification`: image classification on ImageFolder data, the
  pipeline of ``examples/example.py`` and of the ``basetrainer train`` command.
- :mod:`basetrainer.tasks.detection`: object detection on COCO data, ``basetrainer train --task detection``.
- What the tasks share instead of copying it: :mod:`basetrainer.tasks.command_line` (the parser's layout and
  reading a config from it) and :mod:`basetrainer.tasks.startup` (the run's folders and first log lines, the
  clean-up of a run refused at start-up, the launch, the command's error handling).
"""
