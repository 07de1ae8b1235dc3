"""Choosing and applying a strategy: one order for every kind, and models the user's hook placed or wrapped itself."""
import torch
from torch import nn

from basetrainer.engine.options import LoopOptions
from basetrainer.parallel import Strategy, select_strategy, strategy_of
from support.toy import ToyTrainer, toy_cfg


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.linear(x))


class PlainModelTrainer(ToyTrainer):
    """Returns its model without build_model_parallel, as some users' hooks do."""

    def build_model(self, cfg):
        torch.manual_seed(0)
        return nn.Sequential(Block(), nn.Linear(8, 4))


def test_a_model_the_hook_returns_unwrapped_gets_the_strategy_and_everything_it_applies():
    trainer = PlainModelTrainer(toy_cfg(num_epochs=1, activation_checkpointing=["Block"]))
    assert type(trainer.strategy) is Strategy
    assert type(trainer.model[0]).__name__ == "CheckpointWrapper"  # activation checkpointing applied
    trainer.run()
    assert set(trainer.model.state_dict()) == {"0.linear.weight", "0.linear.bias", "1.weight", "1.bias"}


def test_the_strategy_compiles_in_place_after_activation_checkpointing_so_the_keys_stay_the_models():
    options = LoopOptions.from_config(toy_cfg(compile=True, activation_checkpointing=["Block"]), torch.device("cpu"))
    strategy = select_strategy(options, torch.device("cpu"))
    model = strategy.wrap(nn.Sequential(Block(), nn.Linear(8, 4)))
    assert model._compiled_call_impl is not None
    assert type(model[0]).__name__ == "CheckpointWrapper"
    assert set(model.state_dict()) == {"0.linear.weight", "0.linear.bias", "1.weight", "1.bias"}


def test_a_plain_module_has_no_strategy_of_its_own_and_a_wrapped_one_keeps_its_wrapper():
    assert strategy_of(nn.Linear(2, 2), torch.device("cpu")) is None
    wrapped = nn.DataParallel(nn.Linear(2, 2))
    strategy = strategy_of(wrapped, torch.device("cpu"), compile=True)
    assert strategy.adopt(wrapped) is wrapped and wrapped._compiled_call_impl is not None
