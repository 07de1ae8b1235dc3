"""Callbacks written for the earlier library: attributes assigned in ``__init__``, hooks called without ``logs``.

These rely on the Callback base class of ``basetrainer.engine.events`` (``trainer``, ``model``
and ``is_main_process`` assignable; every hook's ``logs`` optional).
"""
import torch

from basetrainer.callbacks.callbacks import Callback
from basetrainer.scheduler.build_scheduler import get_scheduler
from support.toy import ToyTrainer, toy_cfg


class OldStyleCallback(Callback):
    """As user callbacks of the earlier library were written."""

    def __init__(self, trainer, model, is_main_process=True):
        super().__init__()
        self.trainer = trainer
        self.model = model
        self.is_main_process = is_main_process
        self.seen = []

    def on_epoch_begin(self, epoch, logs: dict = {}):  # noqa: B006 - the old signature, kept on purpose
        self.seen.append(("on_epoch_begin", epoch))

    def on_batch_end(self, batch, logs: dict = {}):  # noqa: B006
        self.seen.append(("on_batch_end", batch))

    def on_epoch_end(self, epoch, logs: dict = {}):  # noqa: B006
        self.seen.append(("on_epoch_end", epoch, "train" in logs))


def test_attributes_assigned_in_init_read_back_as_assigned():
    model = torch.nn.Linear(2, 2)
    marker = object()
    callback = OldStyleCallback(trainer=marker, model=model, is_main_process=False)
    assert callback.trainer is marker and callback.model is model and callback.is_main_process is False


def test_old_style_callback_gets_every_event_of_a_run_with_the_trainer_it_was_given():
    trainer = ToyTrainer(toy_cfg(num_epochs=2, train_size=32, batch_size=16, test_size=0))
    callback = OldStyleCallback(trainer, trainer.model)
    trainer.callbacks.append(callback)
    trainer.run()
    assert callback.trainer is trainer and callback.model is trainer.model
    assert callback.seen == [("on_epoch_begin", 0), ("on_batch_end", 0), ("on_batch_end", 1), ("on_epoch_end", 0, True),
                             ("on_epoch_begin", 1), ("on_batch_end", 0), ("on_batch_end", 1), ("on_epoch_end", 1, True)]


def test_base_class_hooks_take_logs_as_optional():
    callback = Callback()
    callback.on_train_begin()
    callback.on_epoch_begin(0)
    callback.on_batch_begin(0)
    callback.on_batch_end(0)
    callback.on_test_begin()
    callback.on_test_end()
    callback.on_epoch_end(0)
    callback.on_train_end()


def test_a_scheduler_can_be_driven_without_logs():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    scheduler = get_scheduler("multi-step", optimizer, 0.1, num_epochs=2, num_steps=2, milestones=[1])
    for epoch in range(2):
        scheduler.on_epoch_begin(epoch)
        for batch in range(2):
            optimizer.step()
            scheduler.on_batch_end(batch)
    assert optimizer.param_groups[0]["lr"] == 0.1 * 0.1
