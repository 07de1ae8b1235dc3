"""TrainerSnapshot: what training changes comes back bitwise, also in a trainer that has trained already."""
import copy

import torch

from basetrainer.callbacks import EMA
from basetrainer.checkpoint.rng import get_rng_state
from basetrainer.data.samplers import find_sampler
from basetrainer.tuning import TrainerSnapshot
from basetrainer.tuning.steps import optimizer_steps
from support.tuning import Disturbable, assert_same_rng, disturbable


def trained_for(trainer, steps: int) -> None:
    training = optimizer_steps(trainer, trainer.train_loader)
    for _ in range(steps):
        next(training)
    training.close()


def test_restore_puts_back_weights_buffers_gradients_and_optimizer_state_of_a_trained_model():
    trainer = disturbable()
    trained_for(trainer, 3)  # momentum buffers, BatchNorm statistics
    trainer.model.eval()
    before = {name: value.clone() for name, value in trainer.model.state_dict().items()}
    momentum = {param: state["momentum_buffer"].clone() for param, state in trainer.optimizer.state.items()}
    with TrainerSnapshot(trainer):
        trained_for(trainer, 4)
    assert all(torch.equal(value, before[name]) for name, value in trainer.model.state_dict().items())
    after = {param: state["momentum_buffer"] for param, state in trainer.optimizer.state.items()}
    assert after.keys() == momentum.keys() and all(torch.equal(after[param], momentum[param]) for param in momentum)
    assert not trainer.model.training  # the mode it was in


def test_restore_puts_back_the_lr_streams_sampler_and_counters():
    trainer = disturbable()
    trained_for(trainer, 2)
    counters = (trainer.state.global_step, trainer.state.samples_seen, trainer.state.batch)
    lr, streams = trainer.optimizer.param_groups[0]["lr"], get_rng_state()
    sampler = find_sampler(trainer.train_loader)
    with TrainerSnapshot(trainer):
        trainer.optimizer.param_groups[0]["lr"] = 5.0
        trained_for(trainer, 20)  # past the epoch's end: the sampler moves on
        torch.rand(3)
    assert trainer.optimizer.param_groups[0]["lr"] == lr and sampler.epoch == 0
    assert (trainer.state.global_step, trainer.state.samples_seen, trainer.state.batch) == counters
    assert_same_rng(get_rng_state(), streams)


def test_a_snapshot_can_be_restored_again_after_more_training():
    trainer = disturbable()
    weights = [param.clone() for param in trainer.model.parameters()]
    with TrainerSnapshot(trainer) as snapshot:
        trained_for(trainer, 2)
        snapshot.restore()
        trained_for(trainer, 2)
    assert all(torch.equal(param, saved) for param, saved in zip(trainer.model.parameters(), weights))


class WithEveryPart(Disturbable):
    """The disturbable trainer with a part of every kind the CPU has: callbacks with state (the schedule, an EMA),
    lr_scaling (its own part), the run, the data layout, the config; and one part of a feature of its own, which
    the snapshot has no code for (as a part added later would be)."""

    def build_callbacks(self, cfg):
        return [*super().build_callbacks(cfg), EMA(decay=0.5)]

    def _track_checkpoint_parts(self):
        super()._track_checkpoint_parts()
        self.checkpoints.parts["counter"] = self.counter

    counter = None


class Counter:
    def __init__(self):
        self.count = 0

    def state_dict(self):
        return {"counter": torch.tensor(self.count)}

    def load_state_dict(self, saved, name):
        self.count = int(saved["counter"])


def test_every_checkpoint_part_is_restored_so_the_checkpoint_after_a_probe_is_the_one_before_it():
    trainer = WithEveryPart(disturbable(lr_scaling={"rule": "linear", "base_batch_size": 8}).cfg)
    trainer.counter = Counter()
    trained_for(trainer, 2)
    manager = trainer.checkpoint_manager()
    assert {"callbacks", "run", "layout", "lr_scaling", "config", "counter"} <= set(manager.parts)
    before = copy.deepcopy(manager.state_dict(rank_only=True))  # its tensors are the live ones
    [ema] = [callback for callback in trainer.callbacks if isinstance(callback, EMA)]
    with TrainerSnapshot(trainer):
        trained_for(trainer, 5)  # the model, the optimizer, the run, the random streams
        ema.load_state_dict({"averaged": {name: torch.ones_like(value) for name, value
                                          in trainer.model.state_dict().items()}, "updates": 7, "last_step": 7})
        trainer.callbacks[0].load_state_dict({**trainer.callbacks[0].state_dict(), "last_epoch": 9})
        trainer.lr_scaling.load_state_dict({}, "a test")
        trainer.counter.count = 9
    after = trainer.checkpoint_manager().state_dict(rank_only=True)
    assert differing(after, before) == []


def differing(left, right, where="") -> list:
    """The places where two checkpoints' entries differ (tensors bitwise)."""
    if isinstance(left, torch.Tensor) or isinstance(right, torch.Tensor):
        same = isinstance(left, torch.Tensor) and isinstance(right, torch.Tensor) and torch.equal(left, right)
        return [] if same else [where]
    if isinstance(left, dict) and isinstance(right, dict):
        if left.keys() != right.keys():
            return [where]
        return [place for key in left for place in differing(left[key], right[key], f"{where}/{key}")]
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)) and len(left) == len(right):
        return [place for index, pair in enumerate(zip(left, right)) for place in differing(*pair, f"{where}/{index}")]
    return [] if left == right else [where]
