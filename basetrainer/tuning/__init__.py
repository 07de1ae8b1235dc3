"""Tools that probe a trainer and put it back: the learning-rate range test and the batch-size finder.

They drive an :class:`~basetrainer.engine.trainer.EngineTrainer` after ``build()`` through its public API, as
Lightning's ``Tuner`` drives its ``Trainer``; the loop does not know them. ``basetrainer lr-find`` and
``basetrainer batch-find`` run them on the classification task (:mod:`.lr_find_command`,
:mod:`.batch_find_command`); on a trainer of your own::

    from basetrainer.tuning import find_batch_size, lr_find

    trainer = MyTrainer(cfg)                 # built, not yet run
    print(lr_find(trainer).override)         # lr=0.0123
    print(find_batch_size(trainer).override) # batch_size=64
    trainer.run()                            # exactly the run it would have been without them
"""
from .batch_size import BatchSizeResult, BatchTrial, find_batch_size
from .range_test import LRFindResult, lr_find
from .methods import TuningMethods
from .snapshot import TrainerSnapshot

__all__ = ["BatchSizeResult", "BatchTrial", "LRFindResult", "TrainerSnapshot", "TuningMethods", "find_batch_size",
           "lr_find"]
