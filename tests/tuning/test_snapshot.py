"""TrainerSnapshot: what training changes comes back bitwise, also in a trainer that has trained already."""
import torch

from basetrainer.checkpoint.rng import get_rng_state
from basetrainer.data.samplers import find_sampler
from basetrainer.tuning import TrainerSnapshot
from basetrainer.tuning.steps import optimizer_steps
from support.tuning import assert_same_rng, disturbable


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
