"""lr_scaling and target under 2 gloo processes: the global batch counts both processes, every rank reaches the
target at the same step with the samples of both, a stop there exits 0 with its checkpoint, and a run resumed on
another number of processes recomputes its rate. One launch (tests/support/workers/target_worker.py) for all."""
import json

import pytest
import torch

from basetrainer.callbacks.model_checkpoint import ModelCheckpoint
from basetrainer.checkpoint.files import load_checkpoint
from support import WORKERS
from support.processes import run_python
from support.toy import ToyTrainer, toy_cfg

pytestmark = pytest.mark.slow

LR = 0.1


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    """The worker's results and folder; first, in this process, the one-process run it resumes (batches of 15,
    lr_scaling linear over 15: a global batch of 15, so the lr as given)."""
    root = tmp_path_factory.mktemp("target_and_lr_scaling")
    ToyTrainer(toy_cfg(num_epochs=1, batch_size=15, lr_scaling={"rule": "linear", "base_batch_size": 15},
                       callbacks=[ModelCheckpoint(model_dir=str(root / "one"))])).run()
    result = run_python([WORKERS / "target_worker.py", root, root / "one" / "last.pth", "--procs", 2])
    assert result.returncode == 0, result.stderr[-3000:]
    return root, torch.load(root / "results.pt")


def test_two_processes_with_accumulation_scale_the_lr_by_their_global_batch(two_processes):
    root, results = two_processes
    line = "lr_scaling linear: lr 0.1 x (16 x 2 processes x 2 accumulated) / 16 = 0.4"
    assert [rank["lr"] for rank in results["scaling"]] == [pytest.approx(4 * LR)] * 2
    assert [rank["arithmetic"] for rank in results["scaling"]] == [line] * 2
    assert line in (root / "train.log").read_text()


def test_every_rank_reaches_the_target_at_the_same_step_with_the_samples_of_both(two_processes):
    _, results = two_processes
    records = [rank["record"] for rank in results["target"]]
    # 64 samples per process, batches of 16: 4 steps per epoch; evaluations at steps 2, 4: 4 is the first >= 3
    assert [(record["step"], record["epoch"], record["samples"]) for record in records] == [(4, 1, 4 * 16 * 2)] * 2


def test_stop_at_the_target_under_two_processes_exits_0_with_a_checkpoint_at_that_step(two_processes):
    root, results = two_processes  # the fixture checked the exit code
    assert [rank["step"] for rank in results["target"]] == [4, 4]
    assert load_checkpoint(str(root / "target" / "model" / "last.pth"))["iteration"] == 4
    assert json.loads((root / "target" / "log" / "target.json").read_text())["step"] == 4


def test_a_run_resumed_on_two_processes_recomputes_its_rate_for_their_global_batch(two_processes):
    root, results = two_processes
    saved = load_checkpoint(str(root / "one" / "last.pth"))
    assert saved["optimizer"]["param_groups"][0]["lr"] == pytest.approx(LR)
    assert [rank["lr"] for rank in results["resume"]] == [pytest.approx(2 * LR)] * 2  # a global batch of 2 x 15
    log = (root / "train.log").read_text()
    assert "lr_scaling linear: lr 0.1 x (15 x 2 processes x 1 accumulated) / 15 = 0.2, recomputed on resume" in log
    assert "written by 1 process(es) with a global batch of 15 and lr 0.1; this run's global batch is 30" in log
