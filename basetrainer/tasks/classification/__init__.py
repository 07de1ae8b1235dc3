"""Image classification as a ready task, the pipeline behind ``examples/example.py`` and ``basetrainer train``:

- :mod:`.settings` and :mod:`.config`: its config keys, and its command line parsed and checked before any work;
- :mod:`.trainer`: ``ClassificationTrainer`` (ImageFolder data or shards of it, a torchvision or timm backbone,
  pruning) and the command's entry points;
- :mod:`.predict`: ``basetrainer predict``, a trained classifier's top classes for a folder of images, as CSV.
"""
from .config import get_parser, parse_config
from .trainer import ClassificationTrainer, build_transform, main, prepare_data, run, train

__all__ = ["ClassificationTrainer", "build_transform", "get_parser", "main", "parse_config", "prepare_data", "run",
           "train"]
