"""A trainer that a probe could disturb in every way a run notices: BatchNorm statistics, dropout (the random
streams), momentum (optimizer state), an lr schedule (a callback holding the optimizer), a shuffled loader that
a sweep cycles; and what a run of it ends with, to compare bitwise."""
import torch
import torch.nn as nn

from basetrainer.checkpoint.rng import get_rng_state
from basetrainer.scheduler.build_scheduler import get_scheduler
from support.toy import ToyTrainer, toy_cfg


class Disturbable(ToyTrainer):
    """The toy classifier with BatchNorm and dropout, trained by SGD with momentum under a warm-up cosine schedule."""

    def build_model(self, cfg):
        torch.manual_seed(0)
        width = cfg.get("width", 16)
        return self.build_model_parallel(nn.Sequential(nn.Linear(8, width), nn.BatchNorm1d(width), nn.ReLU(),
                                                       nn.Dropout(0.2), nn.Linear(width, 4)))

    def build_optimizer(self, cfg):
        return torch.optim.SGD(self.model.parameters(), lr=cfg.get("lr", 0.1), momentum=0.9)

    def build_callbacks(self, cfg):
        return [get_scheduler("cosine", optimizer=self.optimizer, lr_init=cfg.get("lr", 0.1),
                              num_epochs=cfg["num_epochs"], num_steps=self.num_batches, milestones=None,
                              num_warn_up=1, max_iters=None)]


def disturbable(**overrides) -> Disturbable:
    """A Disturbable of 2 epochs on 96 samples (6 batches of 16), without a test set; ``overrides`` of its cfg."""
    return Disturbable(toy_cfg(**{"num_epochs": 2, "train_size": 96, "test_size": 0, **overrides}))


def end_of_run(trainer) -> dict:
    """Every tensor a run leaves behind (weights, buffers, optimizer state), its counters, lr and random streams."""
    tensors = {f"model.{name}": value for name, value in trainer.model.state_dict().items()}
    for index, state in enumerate(trainer.optimizer.state.values()):
        tensors.update({f"optimizer.{index}.{key}": value for key, value in state.items()})
    state = trainer.state
    return {"tensors": tensors, "lr": trainer.optimizer.param_groups[0]["lr"],
            "counters": (state.global_step, state.samples_seen, state.epoch, state.batch),
            "rng": get_rng_state()}


def assert_bitwise_equal(left: dict, right: dict) -> None:
    assert left["tensors"].keys() == right["tensors"].keys()
    differing = [name for name in left["tensors"] if not torch.equal(left["tensors"][name], right["tensors"][name])]
    assert differing == []
    assert (left["lr"], left["counters"]) == (right["lr"], right["counters"])
    assert_same_rng(left["rng"], right["rng"])


def assert_same_rng(left: dict, right: dict) -> None:
    assert left.keys() == right.keys()
    assert left["python"] == right["python"]
    assert torch.equal(left["torch"], right["torch"])
    assert left["numpy"][0] == right["numpy"][0] and torch.equal(left["numpy"][1], right["numpy"][1])
    assert left["numpy"][2:] == right["numpy"][2:]
