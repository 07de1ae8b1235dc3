"""DDP's communication on 2 gloo processes: local SGD, post-local SGD, bf16 compression and PowerSGD.

Three launches of tests/support/workers/communication_worker.py, run once per module: the
first trains plain DDP, post-local SGD (period 4 after 3 steps of DDP), PowerSGD (rank 1 from
step 2) and bf16 compression to the end, then local SGD again, killed at step 8; the second
resumes that one and runs PowerSGD again, killed at step 8; the third resumes PowerSGD. The
kills come after a checkpoint written mid-period (step 6) with the replicas apart. Each run is
18 optimizer steps of a small MLP. The tests read what the runs wrote.
"""
import pytest
import torch
from torch import nn

from support import WORKERS
from support.compare import same_weights
from support.processes import run_python
from support.workers.communication_worker import ShuffledMLP
from support.workers.tiny import NoisyBlobs

pytestmark = pytest.mark.slow

WORKER = WORKERS / "communication_worker.py"


def launch(root, *runs):
    return run_python([WORKER, "--root", root, *(f"--run={run}" for run in runs)])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The folder of every run: ddp, local, powersgd, bf16 (uninterrupted), killed-local, killed-powersgd (resumed)."""
    root = tmp_path_factory.mktemp("communication")
    first = launch(root, "ddp=ddp", "local=local", "powersgd=powersgd", "bf16=bf16", "killed-local=local,kill=1:1")
    assert (root / "bf16" / "rank1.pt").is_file(), first.stderr[-4000:]
    launch(root, "killed-local=local,resume", "killed-powersgd=powersgd,kill=1:1")
    resumed = launch(root, "killed-powersgd=powersgd,resume")
    assert (root / "killed-powersgd" / "rank1.pt").is_file(), resumed.stderr[-4000:]
    return root


def result(runs, label, rank=0):
    return torch.load(runs / label / f"rank{rank}.pt", weights_only=False)


def steps(runs, label, key):
    return [step[key] for step in result(runs, label)["steps"]]


# ---------------------------------------------------------------------- replicas
def test_post_local_sgd_replicas_are_equal_through_the_warm_up_and_after_each_averaging_and_differ_between(runs):
    # Steps 1-3 all-reduce the gradients; step 4 is the first local one, averaged at once; then every 4th.
    averaged = {1, 2, 3, 4, 8, 12, 16}
    assert steps(runs, "local", "equal") == [step in averaged for step in range(1, 19)]


def test_compressed_gradients_keep_the_replicas_equal(runs):
    assert all(steps(runs, "powersgd", "equal")) and all(steps(runs, "bf16", "equal"))


# ---------------------------------------------------------------------- bytes
def test_ddp_all_reduces_every_gradient_in_one_call_per_step(runs):
    parameter_bytes = result(runs, "ddp")["parameter_bytes"]
    assert steps(runs, "ddp", "bytes") == [parameter_bytes] * 18
    assert steps(runs, "ddp", "calls") == [1] * 18


def test_local_sgd_all_reduces_gradients_in_its_warm_up_then_the_parameters_once_a_period(runs):
    parameter_bytes = result(runs, "local")["parameter_bytes"]
    assert steps(runs, "local", "bytes") == [parameter_bytes if step in {1, 2, 3, 4, 8, 12, 16} else 0
                                             for step in range(1, 19)]


def test_bf16_compression_all_reduces_half_the_bytes(runs):
    assert steps(runs, "bf16", "bytes") == [result(runs, "bf16")["parameter_bytes"] // 2] * 18


def test_powersgd_all_reduces_the_rank_1_factors_of_each_matrix_and_the_vectors_whole_from_its_start_step(runs):
    model = ShuffledMLP()
    factors = sum(p.shape[0] + p.shape[1] for p in model.parameters() if p.dim() == 2)  # n + m floats each
    vectors = sum(p.numel() for p in model.parameters() if p.dim() == 1)
    full = result(runs, "powersgd")["parameter_bytes"]
    assert steps(runs, "powersgd", "bytes") == [full, full] + [4 * (factors + vectors)] * 16
    assert steps(runs, "powersgd", "calls") == [1, 1] + [3] * 16  # the vectors, then P, then Q


# ---------------------------------------------------------------------- the average is what is evaluated and saved
def own_parameters(runs, label):
    return [result(runs, label, rank)["parameters"] for rank in (0, 1)]


def exported(runs, label):
    saved = torch.load(runs / label / "model" / "model_final.pth", weights_only=True)
    return saved.get("state_dict", saved)


def test_the_exported_weights_are_the_replicas_average_not_a_replica(runs):
    first, second = own_parameters(runs, "local")
    weights = exported(runs, "local")
    assert not same_weights(first, second)  # step 18 is mid-period
    for name in first:
        torch.testing.assert_close(weights[name], (first[name] + second[name]) / 2, rtol=0, atol=1e-7)


def test_the_last_evaluation_scored_the_replicas_average(runs):
    model = ShuffledMLP()
    model.load_state_dict(exported(runs, "local"))
    data = NoisyBlobs(101, 1, augment=False)
    with torch.no_grad():
        loss = nn.functional.cross_entropy(model(data.x), data.y).item()
    assert result(runs, "local")["logs"]["test"]["loss"] == pytest.approx(loss, abs=1e-6)


def test_the_log_says_when_evaluation_and_checkpoints_use_the_average(runs):
    log = (runs / "local" / "train.log").read_text()
    assert "ddp: local SGD: each replica steps on its own gradients and they average their parameters every 4" in log
    assert ("local SGD: the 2 replicas differ at optimizer step 18 (they average every 4): evaluation, checkpoints "
            "and exported weights here use their average") in log


def test_a_checkpoint_holds_the_average_as_its_model_and_each_replicas_own_parameters(runs):
    saved = torch.load(runs / "local" / "model" / "last.pth", weights_only=True)
    first, second = own_parameters(runs, "local")
    replicas = saved["local_sgd"]["replicas"]
    assert same_weights(replicas[0]["parameters"], first) and same_weights(replicas[1]["parameters"], second)
    assert same_weights(saved["model"], exported(runs, "local"))


# ---------------------------------------------------------------------- exact resume
@pytest.mark.parametrize("kind", ["local", "powersgd"])
def test_killed_mid_period_and_resumed_each_replica_ends_bitwise_equal_to_the_uninterrupted_run(runs, kind):
    for rank in (0, 1):
        uninterrupted, resumed = result(runs, kind, rank), result(runs, f"killed-{kind}", rank)
        assert same_weights(resumed["parameters"], uninterrupted["parameters"])
        momenta = [[state["momentum_buffer"] for state in run["optimizer"]["state"].values()]
                   for run in (uninterrupted, resumed)]
        assert all(torch.equal(a, b) for a, b in zip(*momenta))
    assert result(runs, f"killed-{kind}")["steps"][0]["step"] == 7  # it resumed from the checkpoint of step 6

