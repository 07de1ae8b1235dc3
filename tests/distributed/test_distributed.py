"""Several processes (2 gloo workers on the CPU): results that are correct, not only runs that finish."""
import datetime
import json
import os
import subprocess

import pytest
import torch
import torch.nn as nn

from basetrainer.data import EvalSampler, TrainSampler, build_dataloader
from basetrainer.distributed import failures
from basetrainer.distributed import launch as launch_module
from basetrainer.distributed import process_group
from basetrainer.errors import LaunchError
from support.compare import load_result, same_weights
from support.ddp_reference import assert_equal_to_one_process, one_process_weights
from support.processes import TINY, free_port, popen_python, run_python
from support.toy import ToyTrainer, blobs, toy_cfg
from support.workers.tiny import NoisyBlobs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    """One 2-process job shared by the tests that only read its results."""
    root = tmp_path_factory.mktemp("ddp")
    probes = root / "probes"
    probes.mkdir()
    result = run_python([TINY, "--procs", 2, "--work-dir", root / "work", "--out", root / "w.pt",
                         "--probe-dir", probes, "--epochs", 2])
    assert result.returncode == 0, result.stderr[-3000:]
    return root


def test_train_sampler_shards_by_global_rank_without_overlap():
    data = list(range(40))
    shards = [list(TrainSampler(data, num_replicas=4, rank=r, seed=1)) for r in range(4)]
    assert sorted(sum(shards, [])) == data
    assert all(len(s) == 10 for s in shards)


def test_eval_sampler_counts_every_sample_exactly_once():
    shards = [list(EvalSampler(range(101), num_replicas=2, rank=r)) for r in range(2)]
    assert sorted(shards[0] + shards[1]) == list(range(101))
    assert (len(shards[0]), len(shards[1])) == (51, 50)


def test_set_epoch_changes_the_order_every_epoch_and_only_then():
    sampler = TrainSampler(range(64), num_replicas=2, rank=1, seed=5)
    epoch0, again0 = list(sampler), list(sampler)
    sampler.set_epoch(1)
    assert epoch0 == again0 and list(sampler) != epoch0


def test_the_trainer_calls_set_epoch_by_itself():
    first_batches = []

    from basetrainer.engine.events import Callback

    class FirstBatch(Callback):
        def on_train_summary(self, inputs, outputs, losses, epoch, batch, logs):
            if batch == 0:
                first_batches.append(inputs[1].clone())

    ToyTrainer(toy_cfg(num_epochs=3, callbacks=[FirstBatch()])).run()
    assert not torch.equal(first_batches[0], first_batches[1]) and not torch.equal(first_batches[1], first_batches[2])


@pytest.mark.parametrize("accumulate", [1, 2])
def test_ddp_weights_equal_one_process_trained_on_both_ranks_batches(tmp_path, accumulate):
    """2 ranks x batch 8 under DDP == 1 process stepping on the gradient averaged over both ranks' batches
    (and, accumulating 2 batches per step, over both ranks' 2 batches)."""
    result = run_python([TINY, "--procs", 2, "--work-dir", tmp_path / "w", "--out", tmp_path / "ddp.pt",
                         "--epochs", 2, "--plain", "--accumulate", accumulate])
    assert result.returncode == 0, result.stderr[-3000:]
    assert_equal_to_one_process(load_result(tmp_path / "ddp.pt")["weights"],
                                one_process_weights(tmp_path, ranks=2, epochs=2, accumulate=accumulate))


def test_evaluation_on_2_ranks_counts_101_samples_and_equals_one_process(two_process_run):
    run = load_result(two_process_run / "w.pt")
    assert run["test_num"] == 101
    model = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 4))
    model.load_state_dict(run["weights"])
    model.eval()
    test = NoisyBlobs(101, 1, augment=False)
    with torch.no_grad():
        single_process_loss = nn.functional.cross_entropy(model(test.x), test.y).item()
    assert run["logs"]["test"]["loss"] == pytest.approx(single_process_loss, rel=1e-6)


def test_only_rank_0_writes_files(two_process_run):
    rank0 = json.loads((two_process_run / "probes" / "rank0.json").read_text())
    rank1 = json.loads((two_process_run / "probes" / "rank1.json").read_text())
    assert rank1["writes"] == []
    assert any(p.endswith(".tmp") and "last.pth" in p for p in rank0["writes"])
    assert sorted(os.listdir(two_process_run / "work" / "model"))[-5:] == [
        "last.prev.pth", "last.prev.pth.sha256", "last.pth", "last.pth.sha256", "model_final.pth"]


def test_ranks_draw_different_random_numbers_reproducibly(two_process_run, tmp_path):
    first = [json.loads((two_process_run / "probes" / f"rank{r}.json").read_text())["first_random"] for r in (0, 1)]
    assert first[0] != first[1]
    (tmp_path / "p").mkdir()
    run_python([TINY, "--procs", 2, "--work-dir", tmp_path / "w", "--probe-dir", tmp_path / "p", "--epochs", 1])
    again = [json.loads((tmp_path / "p" / f"rank{r}.json").read_text())["first_random"] for r in (0, 1)]
    assert again == first


def test_the_torchrun_path_trains_to_the_same_weights_as_the_spawn_path(two_process_run, tmp_path):
    result = run_python(["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", free_port(),
                         TINY, "--work-dir", tmp_path / "w", "--out", tmp_path / "w.pt", "--epochs", 2])
    assert result.returncode == 0, result.stderr[-3000:]
    spawned = load_result(two_process_run / "w.pt")["weights"]
    assert same_weights(load_result(tmp_path / "w.pt")["weights"], spawned)


def test_two_machines_on_loopback_train_like_one_machine_with_as_many_processes(two_process_run, tmp_path):
    url = f"tcp://127.0.0.1:{free_port()}"
    machines = [
        popen_python([TINY, "--machines", "2", "--machine-rank", r, "--procs", "1", "--dist-url", url,
                      "--work-dir", tmp_path / "w", "--out", tmp_path / "w.pt", "--epochs", "2"],
                     stderr=subprocess.PIPE, text=True)
        for r in (0, 1)
    ]
    outputs = [m.communicate(timeout=240)[1] for m in machines]
    assert [m.returncode for m in machines] == [0, 0], outputs
    spawned = load_result(two_process_run / "w.pt")["weights"]
    assert same_weights(load_result(tmp_path / "w.pt")["weights"], spawned)


SUMS_WORKER = """
import json, sys, torch, torch.distributed as dist, torch.multiprocessing as mp
from basetrainer.distributed import comm
from basetrainer.metric.meters import mean_over_ranks

def work(rank, port, out):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    sums = comm.sum_over_ranks(torch.tensor(rank + 0.5, dtype=torch.float64), 10 * rank + 1, torch.tensor(2.0))
    mean = mean_over_ranks(torch.tensor(3.0 * (rank + 1)), rank + 1)  # (3 + 6) / (1 + 2)
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"sums": sums, "mean": mean}, f)
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(work, args=(int(sys.argv[1]), sys.argv[2]), nprocs=2)
"""


def test_sums_over_ranks_add_every_ranks_numbers_and_tensors(tmp_path):
    out, script = tmp_path / "sums.json", tmp_path / "sums_worker.py"
    script.write_text(SUMS_WORKER)
    result = run_python([script, free_port(), out])
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(out.read_text()) == {"sums": [2.0, 12.0, 4.0], "mean": 3.0}


def test_more_gpus_than_present_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(LaunchError, match="asked for 4 GPUs per machine but this machine has 1"):
        launch_module.launch(print, 4, args=("never runs",))


def test_gpu_ids_on_a_machine_without_cuda_train_on_the_cpu_with_one_warning(caplog, monkeypatch):
    from basetrainer.distributed import comm

    monkeypatch.setattr(comm, "_warned", set())  # once per process: an earlier test (the fuzz tests) may have warned
    with caplog.at_level("WARNING", logger="basetrainer"):
        devices = [comm.get_device([1]), comm.get_device([1]), comm.get_device([0])]
    if torch.cuda.is_available():
        pytest.skip("CUDA is present")
    assert devices == [torch.device("cpu")] * 3
    assert [r.getMessage() for r in caplog.records] == [
        "gpu_id [1] asks for GPU(s) but CUDA is not available here: training on the CPU"]


def test_auto_dist_url_needs_one_machine():
    with pytest.raises(LaunchError, match="dist_url='auto' works on one machine only"):
        process_group.resolve_dist_url("auto", num_machines=2, machine_rank=0, world_size=4, timeout=None)


def test_auto_dist_url_on_one_machine_is_a_store_the_launcher_serves_on_a_port_the_system_gave():
    url, store = process_group.resolve_dist_url("auto", 1, 0, world_size=1, timeout=datetime.timedelta(seconds=5))
    assert url == f"tcp://127.0.0.1:{store.port}" and store.port > 0
    store.set("key", "value")  # it serves
    assert process_group.resolve_dist_url("tcp://127.0.0.1:1234", 1, 1, world_size=2, timeout=None) == (
        "tcp://127.0.0.1:1234", None)  # given: used as it is (machine 1 checks no port)


@pytest.mark.parametrize("message", ["[pair.cc:545] Timed out waiting 5000ms for recv operation to complete",
                                     "Application timeout caused pair closure"])
def test_a_collective_timeout_names_the_ranks_that_stopped_responding(message):

    reports = [(1.0, 0, "RuntimeError", message, "Traceback ...")]
    error = failures.worker_error(0, [], still_running=[1], reports=reports, first_rank=0,
                                        timeout=datetime.timedelta(seconds=5))
    assert isinstance(error, LaunchError)
    assert str(error) == ("rank 0: a collective timed out after 5s: rank(s) [1] stopped responding; "
                          "raise dist_timeout if they are only slow")


def test_a_slurm_node_list_gives_its_first_host():
    assert process_group._first_host("gpu[003-005,9],login1") == "gpu003"
    assert process_group._first_host("node7,node8") == "node7"


def test_one_process_runs_main_func_in_place():
    assert launch_module.launch(lambda x: x * 2, 1, args=(21,)) == 42


def test_a_training_loader_too_small_for_one_batch_is_a_clear_error():
    from basetrainer.errors import DataError

    with pytest.raises(DataError, match=r"yields no batch: 10 samples per process < batch_size 16, and drop_last "
                                        r"drops the short batch; lower batch_size \(or build the loader with "
                                        r"drop_last=False\)"):
        build_dataloader(blobs(10), 16, 0, phase="train")
