"""No loader worker outlives ``run()``: the workers of the training loader, of every test set and of ``predict``
end when the run returns, raises or stops for a signal, persistent or not; the loaders work again afterwards.

Loader workers are processes (forked by the test process), so these tests are slow; each trains one short epoch.
"""
import os
import signal

import psutil
import pytest

from basetrainer.engine.events import Callback
from basetrainer.errors import TrainingInterrupted
from support.toy import Crash, ToyTrainer, blobs, toy_cfg

pytestmark = pytest.mark.slow

WORKERS = 2


class WorkerTrainer(ToyTrainer):
    """The toy trainer with 2 workers per loader and two test sets; ``persistent`` (a cfg key) chooses the
    training loader's ``persistent_workers`` (the test sets keep theirs, as build_dataloader makes them)."""

    def build_train_loader(self, cfg):
        return self.build_dataloader(blobs(64), 16, WORKERS, persistent_workers=cfg.get("persistent", False))

    def build_test_loader(self, cfg):
        return {name: self.build_dataloader(blobs(32, seed=seed), 16, WORKERS, phase="test", shuffle=False)
                for seed, name in enumerate(("val", "holdout"), start=1)}


def children():
    """The process ids of this process's children, zombies included."""
    return {child.pid for child in psutil.Process().children(recursive=True)}


class Count(Callback):
    """Records how many new children there are at the end of each evaluation: the workers are running then."""

    def __init__(self, before):
        super().__init__()
        self.before, self.seen = before, []

    def on_evaluation_end(self, logs):
        self.seen.append(len(children() - self.before))


@pytest.mark.parametrize("persistent", [False, True])
def test_after_run_returns_no_worker_of_any_loader_remains(persistent):
    before = children()
    count = Count(before)
    trainer = WorkerTrainer(toy_cfg(num_epochs=1, persistent=persistent, callbacks=[count]))
    trainer.run()
    assert count.seen == [2 * WORKERS + WORKERS * persistent]  # two test sets' persistent workers, then training's
    assert children() - before == set()


def test_after_an_error_in_a_step_no_worker_remains_while_the_error_is_still_held():
    before = children()
    with pytest.raises(RuntimeError, match="boom") as raised:
        WorkerTrainer(toy_cfg(num_epochs=1, persistent=True, callbacks=[Crash(batch=1)])).run()
    assert raised.value.__traceback__ is not None  # its frames would keep an abandoned iterator alive
    assert children() - before == set()


def test_after_a_stop_signal_during_an_evaluation_no_worker_remains(tmp_path):
    class StopAtFirstTestBatch(Callback):
        def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs):
            os.kill(os.getpid(), signal.SIGTERM)

    before = children()
    with pytest.raises(TrainingInterrupted, match="stopped by SIGTERM during evaluation"):
        WorkerTrainer(toy_cfg(num_epochs=1, persistent=True, work_dir=str(tmp_path),
                              callbacks=[StopAtFirstTestBatch()])).run()
    assert children() - before == set()


def test_the_loaders_start_new_workers_for_a_second_run_and_for_evaluate_and_predict():
    before = children()
    trainer = WorkerTrainer(toy_cfg(num_epochs=1, persistent=True))
    first = trainer.run()["test"]
    trainer.state.max_epochs = 2
    second = trainer.run()["test"]
    assert set(first) == set(second) == {"val", "holdout"}
    assert trainer.state.epoch == 1
    trainer.evaluate()
    predictions = trainer.predict(trainer.test_loader["val"])
    assert predictions.shape == (32, 4)
    assert children() - before == set()
