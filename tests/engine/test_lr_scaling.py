"""lr_scaling (basetrainer/engine/lr_scaling.py): the optimizer's lr follows the global batch (per-process batch x
data-parallel processes x accumulation), schedules start from the scaled rate, and a resume recomputes it.
Two processes: tests/distributed/test_target_and_lr_scaling.py."""
import math

import pytest

from basetrainer.callbacks.model_checkpoint import ModelCheckpoint
from basetrainer.checkpoint.files import load_checkpoint
from basetrainer.engine.events import Callback
from basetrainer.engine.options import LoopOptions
from basetrainer.errors import ConfigError
from basetrainer.scheduler import get_scheduler
from support.toy import ToyTrainer, toy_cfg

LR = 0.1  # the toy trainer's SGD lr; batches of 16


class Scheduled(ToyTrainer):
    """The toy trainer with a cosine schedule built from the config's lr, as the classification task builds one."""

    def build_callbacks(self, cfg):
        return [get_scheduler("cosine", self.optimizer, lr_init=LR, num_epochs=cfg["num_epochs"],
                              num_steps=self.num_batches, num_warn_up=0.5), *cfg.get("callbacks", [])]


class LRAtStart(Callback):
    """The first param group's lr when training begins (after a resume: as the resume left it)."""

    def on_train_begin(self, logs=None):
        self.lr = self.trainer.optimizer.param_groups[0]["lr"]


@pytest.mark.parametrize("rule, expected", [("linear", LR * 4), ("sqrt", LR * 2)])
def test_the_lr_is_scaled_by_the_rule_of_the_global_batch_over_the_base(rule, expected):
    trainer = ToyTrainer(toy_cfg(accumulate_grad_batches=2, lr_scaling={"rule": rule, "base_batch_size": 8}))
    group = trainer.optimizer.param_groups[0]
    assert (group["lr"], group["initial_lr"]) == (pytest.approx(expected), pytest.approx(expected))


def test_rule_none_leaves_the_lr_as_built():
    trainer = ToyTrainer(toy_cfg(accumulate_grad_batches=2))
    assert trainer.optimizer.param_groups[0]["lr"] == LR and "initial_lr" not in trainer.optimizer.param_groups[0]


@pytest.mark.parametrize("rule, line", [
    ("linear", "lr_scaling linear: lr 0.1 x (16 x 1 process x 2 accumulated) / 8 = 0.4"),
    ("sqrt", "lr_scaling sqrt: lr 0.1 x sqrt((16 x 1 process x 2 accumulated) / 8) = 0.2"),
])
def test_one_line_states_the_arithmetic(rule, line):
    trainer = ToyTrainer(toy_cfg(accumulate_grad_batches=2, lr_scaling={"rule": rule, "base_batch_size": 8}))
    assert trainer.lr_scaling.arithmetic() == line


def test_warm_up_and_the_schedule_start_from_the_scaled_rate():
    trainer = Scheduled(toy_cfg(lr_scaling={"rule": "linear", "base_batch_size": 8}))
    schedule = trainer.callbacks[0]
    assert schedule.scheduler.base_lrs == [pytest.approx(2 * LR)]
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(2 * LR * 0.01)  # warm-up's first factor


def test_a_resume_with_another_global_batch_recomputes_the_rate_at_the_schedules_position(tmp_path):
    """The checkpoint holds the scaled rate of a global batch of 16; resumed with 2 accumulated batches the global
    batch is 32: the rate doubles, and the schedule goes on from its position with the new base."""
    scaling = {"rule": "linear", "base_batch_size": 16}
    cfg = toy_cfg(work_dir=str(tmp_path), num_epochs=2, lr_scaling=scaling)
    first = Scheduled({**cfg, "callbacks": [ModelCheckpoint(model_dir=str(tmp_path / "model"))]})
    first.run()  # 2 epochs; resumed below from the end of the first one
    saved = load_checkpoint(str(tmp_path / "model" / "last.prev.pth"))
    saved_lr = saved["optimizer"]["param_groups"][0]["lr"]
    start = LRAtStart()
    resumed = Scheduled({**cfg, "accumulate_grad_batches": 2, "resume": str(tmp_path / "model" / "last.prev.pth"),
                         "callbacks": [start]})
    resumed.run()
    assert start.lr == pytest.approx(2 * saved_lr)
    assert resumed.callbacks[0].scheduler.base_lrs == [pytest.approx(2 * LR)]


def test_a_resume_with_the_same_global_batch_keeps_the_rate(tmp_path):
    cfg = toy_cfg(work_dir=str(tmp_path), num_epochs=2, lr_scaling={"rule": "sqrt", "base_batch_size": 4})
    Scheduled({**cfg, "callbacks": [ModelCheckpoint(model_dir=str(tmp_path / "model"))]}).run()
    saved = load_checkpoint(str(tmp_path / "model" / "last.prev.pth"))
    start = LRAtStart()
    Scheduled({**cfg, "resume": str(tmp_path / "model" / "last.prev.pth"), "callbacks": [start]}).run()
    assert start.lr == pytest.approx(saved["optimizer"]["param_groups"][0]["lr"])
    assert saved["lr_scaling"]["factor"] == pytest.approx(math.sqrt(16 / 4))


def test_a_loader_without_a_batch_size_is_refused_when_scaling():
    class BatchSampled(ToyTrainer):
        def build_train_loader(self, cfg):
            loader = super().build_train_loader(cfg)
            return type(loader)(loader.dataset, batch_sampler=[[0, 1], [2, 3]])

    with pytest.raises(ConfigError, match="lr_scaling needs the training loader's batch_size"):
        BatchSampled(toy_cfg(lr_scaling={"rule": "linear", "base_batch_size": 8}))


@pytest.mark.parametrize("scaling, message", [
    ({"rule": "linear"}, "config key 'lr_scaling' expects .* with base_batch_size set unless rule is none, got .*: "
                         "base_batch_size is missing"),
    ({"rule": "sqrt", "base_batch_size": 0}, "config key 'lr_scaling' expects .*: base_batch_size is int 0"),
    ({"rule": "square", "base_batch_size": 8}, "config key 'lr_scaling' expects .*: rule is str 'square'"),
    ({"rule": "linear", "base_batch_size": 2.5}, "config key 'lr_scaling' expects .*: base_batch_size is float 2.5"),
])
def test_an_unknown_rule_or_a_missing_or_bad_base_batch_size_is_a_one_line_error(scaling, message):
    with pytest.raises(ConfigError, match=message) as error:
        LoopOptions.from_config(toy_cfg(lr_scaling=scaling))
    assert "\n" not in str(error.value)
