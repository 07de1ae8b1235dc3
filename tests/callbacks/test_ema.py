"""EMA of the weights: the update formula and when it runs, evaluation with the average, export, resume."""
import pytest
import torch
import torch.nn as nn

from basetrainer.callbacks.ema import EMA
from basetrainer.callbacks.losses_recorder import LossesRecorder
from basetrainer.callbacks.model_checkpoint import ModelCheckpoint
from basetrainer.checkpoint import model_state_dict
from basetrainer.engine.events import NORMAL, Callback
from basetrainer.engine.state import RunState
from support.workers.metrics_worker import ClassifierTrainer, blobs, cfg, make_model


class FakeTrainer:
    """What EMA uses of a trainer: the model, the run state and the export-weights request."""

    def __init__(self, model):
        self.model, self.state = model, RunState(max_epochs=1)

    def set_export_weights(self, provider):
        self.export_weights = provider


def scalar_model(value):
    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(value)
    return model


def started(ema, model):
    trainer = FakeTrainer(model)
    ema.set_trainer(trainer)
    ema.on_train_begin({})
    return trainer


def step(trainer, ema, new_value=None, accumulating=False):
    """One batch: maybe an optimizer step that sets the weight to ``new_value``, then on_batch_end."""
    trainer.state.accumulating = accumulating
    if not accumulating:
        with torch.no_grad():
            trainer.model.weight.fill_(new_value)
        trainer.state.global_step += 1
    ema.on_batch_end(0, {})


def averaged(ema):
    return ema.averaged["weight"].item()


# ---------------------------------------------------------------------- the average
def test_average_follows_the_ema_formula():
    ema = EMA(decay=0.5, warmup=False)
    trainer = started(ema, scalar_model(1.0))
    step(trainer, ema, 3.0)
    assert averaged(ema) == 0.5 * 1.0 + 0.5 * 3.0
    step(trainer, ema, 5.0)
    assert averaged(ema) == 0.5 * 2.0 + 0.5 * 5.0


def test_warmup_raises_the_decay_towards_its_target():
    ema = EMA(decay=0.99)
    decays = []
    for updates in (0, 1, 2, 10_000):
        ema.updates = updates
        decays.append(ema.current_decay())
    assert decays == pytest.approx([2 / 11, 3 / 12, 4 / 13, 0.99])


def test_no_update_while_gradients_accumulate():
    ema = EMA(decay=0.5, warmup=False)
    trainer = started(ema, scalar_model(1.0))
    step(trainer, ema, accumulating=True)
    assert averaged(ema) == 1.0 and ema.updates == 0


def test_one_update_per_optimizer_step_and_every_n_steps():
    ema = EMA(decay=0.5, warmup=False, every_n_steps=2)
    trainer = started(ema, scalar_model(1.0))
    step(trainer, ema, 3.0)  # iteration 1: not a multiple of 2
    assert ema.updates == 0
    step(trainer, ema, 3.0)  # iteration 2
    ema.on_batch_end(1, {})  # a batch without a new optimizer step (e.g. a skipped one)
    assert ema.updates == 1 and averaged(ema) == 2.0


def test_integer_buffers_are_copied_not_averaged():
    model = nn.BatchNorm1d(2)
    ema = EMA(decay=0.5, warmup=False)
    trainer = started(ema, model)
    model.train()
    model(torch.randn(4, 2))
    model(torch.randn(4, 2))
    trainer.state.global_step += 1
    ema.on_batch_end(0, {})
    assert ema.averaged["num_batches_tracked"].item() == 2
    assert torch.allclose(ema.averaged["running_mean"], 0.5 * model.running_mean)  # started from zeros


# ---------------------------------------------------------------------- with the trainer
class WeightsSeen(Callback):
    """Records the first layer's weight during evaluation and after it, next to the EMA's average."""

    priority = NORMAL

    def __init__(self, ema):
        super().__init__()
        self.ema, self.during, self.after = ema, [], []

    def _pair(self):
        return self.trainer.model[0].weight.detach().clone(), self.ema.averaged["0.weight"].clone()

    def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs):
        self.during.append(self._pair())

    def on_test_end(self, logs):
        self.after.append(self._pair())


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ema")
    ema = EMA(decay=0.9)
    seen = WeightsSeen(ema)
    trainer = ClassifierTrainer(cfg(num_epochs=2, callbacks=[ema, seen, LossesRecorder(),
                                                             ModelCheckpoint(model_dir=str(folder))]))
    logs = trainer.run()
    return trainer, ema, seen, logs, folder


def test_evaluation_runs_with_the_averaged_weights(run):
    _, _, seen, _, _ = run
    assert seen.during and all(torch.equal(model, average) for model, average in seen.during)


def test_training_weights_are_back_after_evaluation(run):
    _, _, seen, _, _ = run
    assert all(not torch.equal(model, average) for model, average in seen.after)


def test_test_loss_is_the_averaged_models(run):
    _, ema, _, logs, _ = run
    model = make_model()
    model.load_state_dict(ema.weights_for_export())
    model.eval()
    x, y = blobs(50, seed=1).tensors
    with torch.no_grad():
        loss = nn.functional.cross_entropy(model(x), y).item()
    assert logs["test"]["loss"] == pytest.approx(loss, rel=1e-5)


def test_weights_for_export_is_a_plain_cpu_state_dict(run):
    _, ema, _, _, _ = run
    weights = ema.weights_for_export()
    assert list(weights) == list(make_model().state_dict())
    assert all(t.device.type == "cpu" for t in weights.values())


def test_last_checkpoint_holds_the_training_weights_and_the_average(run):
    trainer, ema, _, _, folder = run
    state = torch.load(folder / "last.pth", weights_only=True)
    assert all(torch.equal(v, state["model"][k]) for k, v in model_state_dict(trainer.model).items())
    saved = state["callbacks"]["basetrainer.callbacks.ema.EMA"]
    assert saved["updates"] == ema.updates == 2 * 6
    assert all(torch.equal(v, saved["averaged"][k]) for k, v in ema.weights_for_export().items())


def test_a_resumed_run_has_the_same_average_as_an_uninterrupted_one(tmp_path):
    def train(folder, num_epochs, resume=None):
        ema = EMA(decay=0.9)
        trainer = ClassifierTrainer(cfg(num_epochs=num_epochs, resume=resume,
                                        callbacks=[ema, ModelCheckpoint(model_dir=str(folder))]))
        trainer.run()
        return ema

    uninterrupted = train(tmp_path / "a", 3)
    train(tmp_path / "b", 2)
    resumed = train(tmp_path / "b", 3, resume="auto")
    assert resumed.updates == uninterrupted.updates
    expected = uninterrupted.weights_for_export()
    assert all(torch.equal(v, expected[k]) for k, v in resumed.weights_for_export().items())


def test_a_resumed_ema_still_updates_at_the_step_its_checkpoint_was_taken_before():
    # a stop in an evaluation that comes before on_batch_end saves step k before EMA's update for k
    ema = EMA(decay=0.5, warmup=False)
    trainer = started(ema, scalar_model(1.0))
    step(trainer, ema, 3.0)  # step 1, averaged
    saved = ema.state_dict()
    resumed = EMA(decay=0.5, warmup=False)
    resumed.load_state_dict(saved)
    again = FakeTrainer(scalar_model(3.0))
    again.state.global_step = 2  # the checkpoint was taken after step 2, before its on_batch_end
    resumed.set_trainer(again)
    resumed.on_train_begin({})
    resumed.on_batch_end(0, {})
    assert resumed.updates == 2 and averaged(resumed) == 0.5 * 2.0 + 0.5 * 3.0
