"""Ready-made training pipelines built on EngineTrainer (they import torchvision; ``import basetrainer`` does not).

- :mod:`basetrainer.tasks.classification`: image classification on ImageFolder data, the
  pipeline of ``examples/example.py`` and of the ``basetrainer train`` command.
"""
