"""Step-based training: max_iters, evaluation every N steps, several test sets, the endless sampler, predict."""

import pytest
import torch

from basetrainer.callbacks.losses_recorder import LossesRecorder
from basetrainer.callbacks.model_checkpoint import ModelCheckpoint
from basetrainer.data import StreamSampler, build_dataloader
from basetrainer.engine.events import Callback
from basetrainer.errors import ConfigError
from support import WORKERS
from support.compare import same_weights
from support.processes import run_python
from support.toy import Crash, ToyTrainer, blobs, toy_cfg


class Steps(Callback):
    """Counts forward batches and records the global step and test loss of every evaluation."""

    def __init__(self):
        super().__init__()
        self.batches, self.evaluations, self.losses = 0, [], []

    def on_train_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
        self.batches += 1

    def on_evaluation_end(self, logs=None):
        self.evaluations.append(self.state.global_step)
        self.losses.append(logs["test"].get("loss"))


def step_cfg(**overrides):
    # 128 samples in batches of 16: 8 batches, 4 optimizer steps per epoch with accumulation 2
    return toy_cfg(**{"num_epochs": None, "max_iters": 37, "accumulate_grad_batches": 2, **overrides})


def test_max_iters_makes_exactly_that_many_optimizer_steps_counting_accumulation():
    steps = Steps()
    trainer = ToyTrainer(step_cfg(callbacks=[steps]))
    trainer.run()
    assert trainer.state.global_step == 37 and steps.batches == 74
    assert trainer.state.max_epochs == 10  # 9 full epochs of 4 steps, and one of 1


def test_setting_both_num_epochs_and_max_iters_is_an_error_naming_both():
    with pytest.raises(ConfigError, match=r"num_epochs \(2\) and max_iters \(37\) are both set"):
        ToyTrainer(step_cfg(num_epochs=2))


def test_evaluation_every_n_steps_and_at_the_end_chooses_the_best_model_among_them(tmp_path):
    steps = Steps()
    checkpoint = ModelCheckpoint(model_dir=str(tmp_path), indicator="loss", mode="min", save_best_k=1)
    trainer = ToyTrainer(step_cfg(eval_every_n_iters=10, lr=0.5, callbacks=[LossesRecorder(), steps, checkpoint]))
    trainer.run()
    assert steps.evaluations == [10, 20, 30, 37]
    best_step = steps.evaluations[steps.losses.index(min(steps.losses))]
    assert [p.name.split("_")[2] for p in tmp_path.glob("best_model_*")] == [f"step{best_step:07d}"]


def test_a_run_killed_at_step_23_resumes_evaluates_at_30_and_37_only_and_ends_like_an_uninterrupted_one(tmp_path):
    def run(work_dir, *extra, **cfg):
        steps = Steps()
        callbacks = [LossesRecorder(), steps, ModelCheckpoint(model_dir=str(work_dir), every_n_iters=2), *extra]
        trainer = ToyTrainer(step_cfg(eval_every_n_iters=10, work_dir=str(work_dir), callbacks=callbacks, **cfg))
        trainer.run()
        return trainer, steps

    reference, _ = run(tmp_path / "whole")
    killed_at_step_23 = Crash(batch=5, epoch=5, error=KeyboardInterrupt())  # epoch 5 batch 5: the 23rd step's second half
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "killed", killed_at_step_23)
    resumed, steps = run(tmp_path / "killed", resume="auto")
    assert steps.evaluations == [30, 37]
    assert same_weights(resumed.model.state_dict(), reference.model.state_dict())


def test_several_test_sets_publish_their_values_by_name():
    class TwoSets(ToyTrainer):
        def build_test_loader(self, cfg):
            return {"val": self.build_dataloader(blobs(48, seed=1), 16, phase="test", shuffle=False),
                    "hard": self.build_dataloader(blobs(32, seed=2), 16, phase="test", shuffle=False)}

    logs = TwoSets(toy_cfg(num_epochs=1, callbacks=[LossesRecorder()])).run()
    assert set(logs["test"]) == {"val", "hard"} and set(logs["test"]["val"]) == {"loss"}
    assert logs["test"]["val"]["loss"] != logs["test"]["hard"]["loss"]


def test_one_test_loader_keeps_the_flat_layout():
    logs = ToyTrainer(toy_cfg(num_epochs=1, callbacks=[LossesRecorder()])).run()
    assert set(logs["test"]) == {"loss"}


def test_the_endless_sampler_continues_the_same_sequence_after_a_resume_and_across_passes():
    dataset = blobs(10)
    whole = _take(StreamSampler(dataset, num_replicas=2, rank=1, seed=4), 17)
    resumed = StreamSampler(dataset, num_replicas=2, rank=1, seed=4)
    resumed.skip(6)  # 6 indices in: the next pass starts after 5
    assert _take(resumed, 11) == whole[6:]
    assert whole[:5] != whole[5:10]  # the second pass is shuffled anew


def test_a_stream_loader_trains_for_max_iters_and_resumes_mid_stream(tmp_path):
    class Streaming(ToyTrainer):
        def build_train_loader(self, cfg):
            return build_dataloader(blobs(40), 8, phase="train", stream=True, seed=self.seed)

    def run(**cfg):
        trainer = Streaming(toy_cfg(**{"num_epochs": None, "max_iters": 12, "test_size": 0, **cfg}))
        trainer.run()
        return trainer

    reference = run()
    assert reference.state.global_step == 12 and reference.state.max_epochs == 1
    with pytest.raises(KeyboardInterrupt):
        run(callbacks=[ModelCheckpoint(model_dir=str(tmp_path), every_n_iters=4),
                       Crash(batch=6, error=KeyboardInterrupt())])
    resumed = run(resume="auto", work_dir=str(tmp_path), callbacks=[ModelCheckpoint(model_dir=str(tmp_path))])
    assert same_weights(resumed.model.state_dict(), reference.model.state_dict())


def test_a_loader_without_length_needs_max_iters():
    from basetrainer.errors import DataError

    class Streaming(ToyTrainer):
        def build_train_loader(self, cfg):
            return build_dataloader(blobs(40), 8, phase="train", stream=True)

    with pytest.raises(DataError, match="has no length .* set max_iters"):
        Streaming(toy_cfg(num_epochs=1))


def _take(sampler, n):
    iterator = iter(sampler)
    return [next(iterator) for _ in range(n)]


def test_predict_returns_one_row_per_sample_in_dataset_order():
    trainer = ToyTrainer(toy_cfg(num_epochs=1))
    data = blobs(37, seed=5)
    loader = build_dataloader(data, 8, phase="test", shuffle=False)
    rows = trainer.predict(loader)
    with torch.no_grad():
        expected = trainer.model(data.tensors[0])
    assert rows.shape == (37, 4) and torch.allclose(rows, expected)


STEPS_WORKER = str(WORKERS / "steps_worker.py")


@pytest.fixture(scope="module")
def one_and_two_processes(tmp_path_factory):
    root = tmp_path_factory.mktemp("steps")
    for procs in (1, 2):
        result = run_python([STEPS_WORKER, root / f"p{procs}.pt", "--procs", procs], timeout=240)
        assert result.returncode == 0, result.stderr[-3000:]
    return [torch.load(root / f"p{procs}.pt", weights_only=False) for procs in (1, 2)]


@pytest.mark.slow
def test_two_test_sets_each_count_their_own_samples_exactly_under_2_ranks(one_and_two_processes):
    one, two = one_and_two_processes
    assert one["seen"] == two["seen"] == {"val": 101, "hard": 37}
    assert set(two["logs"]["test"]) == {"val", "hard"}


@pytest.mark.slow
def test_predict_over_2_ranks_equals_1_rank_row_for_row(one_and_two_processes):
    one, two = one_and_two_processes
    assert one["predictions"].shape == two["predictions"].shape == (101, 4)
    assert torch.allclose(one["predictions"], two["predictions"], atol=1e-6)
