"""The checkpoint manager: what a checkpoint holds, under which names, where it goes, and what a resume puts back."""
import pytest
import torch

from basetrainer.callbacks import EMA, ModelCheckpoint
from basetrainer.checkpoint import files
from basetrainer.checkpoint.manager import CheckpointManager
from basetrainer.checkpoint.parts import CallbackStates, ModelAndOptimizer
from basetrainer.engine.events import Callback
from basetrainer.engine.trainer import EngineTrainer
from basetrainer.errors import CheckpointError
from basetrainer.parallel import Strategy
from basetrainer.tasks.classification import ClassificationTrainer
from support.toy import ToyTrainer, toy_cfg


class Counter(Callback):
    """A stateful callback: counts the epochs it saw, and keeps the count across a resume."""

    def __init__(self, state_key=None):
        super().__init__()
        self.epochs = 0
        if state_key:
            self.state_key = state_key

    def on_epoch_end(self, epoch, logs=None):
        self.epochs += 1

    def state_dict(self):
        return {"epochs": self.epochs}

    def load_state_dict(self, state):
        self.epochs = state["epochs"]


def test_callback_states_are_kept_under_their_class_name_so_adding_a_callback_shifts_nothing(tmp_path):
    ToyTrainer(toy_cfg(num_epochs=1, callbacks=[Counter(), ModelCheckpoint(model_dir=str(tmp_path))])).run()
    counter = Counter()
    # resumed with an EMA in front: the counter's state is found by its name, not its place in the list
    ToyTrainer(toy_cfg(num_epochs=2, resume="auto", work_dir=str(tmp_path),
                       callbacks=[EMA(decay=0.9), counter, ModelCheckpoint(model_dir=str(tmp_path))])).run()
    assert counter.epochs == 2
    saved = torch.load(tmp_path / "last.pth", weights_only=True)["callbacks"]
    assert saved.keys() == {"test_manager.Counter", "basetrainer.callbacks.ema.EMA",
                            "basetrainer.callbacks.model_checkpoint.ModelCheckpoint", "run_summary"}


def test_callbacks_of_one_class_are_numbered_and_a_state_key_names_one_itself():
    keys = [key for key, _, _ in CallbackStates([Counter(), Counter(), Counter(state_key="mine")]).keyed()]
    assert keys == ["test_manager.Counter", "test_manager.Counter#2", "mine"]


def test_a_checkpoint_that_keyed_callbacks_by_position_still_loads(tmp_path):
    ToyTrainer(toy_cfg(num_epochs=1, callbacks=[Counter(), ModelCheckpoint(model_dir=str(tmp_path))])).run()
    saved = files.load_checkpoint(str(tmp_path / "last.pth"))
    states = saved["callbacks"]
    saved["callbacks"] = {"0:Counter": states["test_manager.Counter"],
                          "1:ModelCheckpoint": states["basetrainer.callbacks.model_checkpoint.ModelCheckpoint"]}
    old = tmp_path / "old" / "last.pth"
    files.save_checkpoint(saved, str(old))  # as releases before the manager wrote it
    counter = Counter()
    ToyTrainer(toy_cfg(num_epochs=2, resume=str(old), callbacks=[counter])).run()
    assert counter.epochs == 2


def test_a_stop_right_after_a_save_at_the_same_position_writes_nothing_again(tmp_path):
    trainer = ToyTrainer(toy_cfg(num_epochs=1, callbacks=[ModelCheckpoint(model_dir=str(tmp_path))]))
    trainer.run()
    manager = trainer.checkpoints
    assert manager.path == str(tmp_path / "last.pth")
    assert manager.save_for_stop() == f"{manager.path} holds this state already"
    trainer.state.global_step += 1  # the run moved on: the next stop saves
    assert manager.save_for_stop() == f"saved {manager.path}"


def test_the_manager_round_trips_a_model_and_optimizer_without_a_trainer(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    manager = CheckpointManager()
    manager.track(ModelAndOptimizer(Strategy(torch.device("cpu")), model, optimizer), {}, position=lambda: None,
                  reseed=None)
    path = manager.save(str(tmp_path / "last.pth"))
    fresh = torch.nn.Linear(3, 2)
    fresh_optimizer = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
    other = CheckpointManager(resume=path)
    other.track(ModelAndOptimizer(Strategy(torch.device("cpu")), fresh, fresh_optimizer), {}, position=lambda: None,
                reseed=None)
    assert other.resume() == path
    assert torch.equal(fresh.weight, model.weight)
    assert torch.equal(fresh_optimizer.state_dict()["state"][0]["momentum_buffer"],
                       optimizer.state_dict()["state"][0]["momentum_buffer"])


def test_the_engine_declares_only_loop_settings_and_a_task_adds_its_own():
    assert "lr" not in EngineTrainer.resume_settings and "milestones" not in EngineTrainer.resume_settings
    assert {"lr", "optim_type", "milestones"} <= set(ClassificationTrainer.resume_settings)
    assert set(EngineTrainer.resume_settings) <= set(ClassificationTrainer.resume_settings)


def frozen_backbone_model():
    """A frozen convolution and BatchNorm (a pretrained backbone) under a head that trains."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 4 * 4, 2))
    for parameter in [*model[0].parameters(), *model[1].parameters()]:
        parameter.requires_grad_(False)
    return model


def test_without_frozen_weights_a_checkpoint_holds_what_trains_and_buffers_and_resumes_into_the_rebuilt_model(
        tmp_path):
    model = frozen_backbone_model()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.1)
    model(torch.randn(2, 3, 6, 6)).sum().backward()  # training mode: the BatchNorm statistics move too
    optimizer.step()
    manager = CheckpointManager()
    manager.track(ModelAndOptimizer(Strategy(torch.device("cpu")), model, optimizer, frozen_weights=False), {},
                  position=lambda: None, reseed=None)
    path = manager.save(str(tmp_path / "last.pth"))
    assert set(files.load_checkpoint(path)["model"]) == {
        "1.running_mean", "1.running_var", "1.num_batches_tracked", "3.weight", "3.bias"}
    fresh = frozen_backbone_model()  # what build_model makes again: the same frozen weights, a fresh head
    fresh_optimizer = torch.optim.AdamW([p for p in fresh.parameters() if p.requires_grad], lr=0.1)
    other = CheckpointManager(resume=path)
    other.track(ModelAndOptimizer(Strategy(torch.device("cpu")), fresh, fresh_optimizer, frozen_weights=False), {},
                position=lambda: None, reseed=None)
    assert other.resume() == path
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), model.state_dict().values()))
    assert torch.equal(fresh_optimizer.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"])


def test_without_frozen_weights_a_checkpoint_of_another_model_is_still_refused(tmp_path):
    model = frozen_backbone_model()
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    manager = CheckpointManager()
    manager.track(ModelAndOptimizer(Strategy(torch.device("cpu")), model, optimizer, frozen_weights=False), {},
                  position=lambda: None, reseed=None)
    path = manager.save(str(tmp_path / "last.pth"))
    other_model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                                      torch.nn.Linear(4 * 4 * 4, 3))
    other = CheckpointManager(resume=path)
    other.track(ModelAndOptimizer(Strategy(torch.device("cpu")), other_model, torch.optim.SGD(
        other_model.parameters(), lr=0.1), frozen_weights=False), {}, position=lambda: None, reseed=None)
    with pytest.raises(CheckpointError, match=r"was written by another model: \[shape differs: 3.weight"):
        other.resume()
