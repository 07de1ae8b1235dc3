"""The tuning tools as methods of a trainer: ``class MyTrainer(TuningMethods, EngineTrainer)``, then
``trainer.lr_find()`` and ``trainer.find_batch_size()``. The engine knows nothing of them: the mixin sits here,
above it, and calls the same functions a script can call on any trainer."""
from .batch_size import find_batch_size
from .range_test import lr_find


class TuningMethods:
    """Mixed into an :class:`~basetrainer.engine.trainer.EngineTrainer` subclass (before it in the bases)."""

    def lr_find(self, **options):
        """The learning-rate range test on this trainer (see :func:`basetrainer.tuning.lr_find`)."""
        return lr_find(self, **options)

    def find_batch_size(self, **options):
        """The batch-size finder on this trainer (see :func:`basetrainer.tuning.find_batch_size`)."""
        return find_batch_size(self, **options)
