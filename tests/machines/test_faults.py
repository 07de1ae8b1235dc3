"""Machines lost and links cut, on 2 machines x 1 process through launch (one shared work dir, as a shared file
system): a machine killed mid-epoch ends the other's processes in one line naming it, with the exit code a scheduler
requeues on, and the job started again with ``resume: auto`` ends as a run that lost nothing; a link down for 5 s
mid-all-reduce is waited out when the timeout allows it, and ends the job through the watchdog, naming the ranks
gone quiet, when it does not; ``torchrun --nnodes 1:2 --max-restarts 1`` goes on with the machine left, training every sample of the
interrupted epoch once (the job on shards, each rank recording what it trained). Rank 1
(machine 1) pauses after step 6 (of 36), so that the fault lands mid-epoch whatever the machine's load.

One process per machine: with 2 ranks gloo's sums do not depend on the order it adds in, which with 4 depends on
DDP's bucket layout, rebuilt after a fresh DDP's first step (a resumed run then differs from an uninterrupted one in
the last bits, on one machine as on two)."""
import json
import time

import pytest

from support.compare import load_result, same_weights
from support.ddp_reference import assert_equal_to_one_process, one_process_weights
from support.processes import TINY, wait_until
from support.shards import numbered_shards

pytestmark = pytest.mark.slow

TRAIN_SIZE = 288  # 18 steps of 2 x 8 samples an epoch
JOB = ["--procs", 1, "--machines", 2, "--train-size", TRAIN_SIZE, "--epochs", 2, "--plain", "--every-n-iters", 4]
CUT_SECONDS = 5


def start(machines, root, *extra, name="run"):
    url = f"tcp://{machines[0].address}:29500"
    return [machines.python(m, [TINY, *JOB, "--machine-rank", m.index, "--dist-url", url, "--work-dir", root / "work",
                                "--out", root / "w.pt", *extra], root / f"{name}{m.index}.log") for m in machines]


def wait_for_checkpoint(root, processes, timeout=180):
    """Until rank 0 saved its first checkpoint (step 4): the job is training."""
    wait_until((root / "work" / "model" / "last.pth").exists, processes, timeout, lambda: "the job did not train")


def results(root, processes, name="run", timeout=240):
    return [(p.wait(timeout=timeout), (root / f"{name}{i}.log").read_text()) for i, p in enumerate(processes)]


@pytest.fixture(scope="module")
def cut_and_waited_out(machines, tmp_path_factory):
    """Machine 1's link down for CUT_SECONDS while the ranks wait in an all-reduce (dist_timeout 60 s)."""
    root = tmp_path_factory.mktemp("cut_waited_out")
    processes = start(machines, root, "--hang-on-rank", "1:6:1", "--timeout", 60)
    wait_for_checkpoint(root, processes)
    machines.cut(machines[1])
    time.sleep(CUT_SECONDS)
    machines.restore(machines[1])
    return root, results(root, processes)


@pytest.fixture(scope="module")
def machine_lost(machines, tmp_path_factory):
    """Machine 1 killed (every process in it) while its rank 1 stalls mid-epoch; then both machines started again
    with resume: auto."""
    root = tmp_path_factory.mktemp("machine_lost")
    processes = start(machines, root, "--hang-on-rank", "1:6", "--timeout", 60)
    wait_for_checkpoint(root, processes)
    time.sleep(1)
    machines.kill(machines[1])
    killed = time.monotonic()
    survivor = processes[0].wait(timeout=120)
    seconds = time.monotonic() - killed
    lost = (survivor, (root / "run0.log").read_text(), seconds)
    resumed = results(root, start(machines, root, "--resume", "auto", "--timeout", 60, name="resumed"), "resumed")
    return root, lost, resumed


def test_a_link_cut_for_5_s_within_the_timeout_is_waited_out_and_the_run_trains_as_one_process(
        cut_and_waited_out, tmp_path):
    root, ended = cut_and_waited_out
    assert [code for code, _ in ended] == [0, 0], [log[-3000:] for _, log in ended]
    reference = one_process_weights(tmp_path, ranks=2, epochs=2, train_size=TRAIN_SIZE)
    assert_equal_to_one_process(load_result(root / "w.pt")["weights"], reference)


def test_a_machine_lost_ends_the_other_s_processes_in_one_line_naming_it_with_the_requeue_exit_code(
        machine_lost, machines):
    _, (code, log, seconds), _ = machine_lost
    assert code == 75, log[-3000:]
    assert seconds < 60  # well within dist_timeout: the lost peer's connections closed
    last = log.strip().splitlines()[-1]
    assert last.startswith("error: rank ") and f"the machine at {machines[1].address} went away" in last, last
    assert last.endswith("rerun with resume: auto to go on from the last checkpoint")


def test_the_job_started_again_with_resume_auto_ends_as_the_run_that_lost_nothing(machine_lost, cut_and_waited_out):
    root, _, resumed = machine_lost
    assert [code for code, _ in resumed] == [0, 0], [log[-3000:] for _, log in resumed]
    assert same_weights(load_result(root / "w.pt")["weights"], load_result(cut_and_waited_out[0] / "w.pt")["weights"])


def test_a_link_cut_longer_than_the_watchdog_allows_ends_the_job_naming_the_ranks_gone_quiet(machines, tmp_path):
    processes = start(machines, tmp_path, "--hang-on-rank", "1:6:1", "--timeout", 60, "--watchdog", 3)
    wait_for_checkpoint(tmp_path, processes)
    machines.cut(machines[1])
    started = time.monotonic()
    try:
        code, log = results(tmp_path, processes[:1], timeout=60)[0]
    finally:
        machines.restore(machines[1])
    assert time.monotonic() - started < 30  # never hangs past the timeout
    assert code == 124, log[-3000:]
    line = log.strip().splitlines()[-1]
    assert line.startswith("error: rank 0: watchdog: ") and "rank(s) [1]" in line, line  # the peer cut off
    # the far side: its own watchdog, or, when the link came back first, machine 0's processes gone
    far_code, far_line = processes[1].wait(timeout=60), (tmp_path / "run1.log").read_text().strip().splitlines()[-1]
    assert (far_code, far_line.endswith("the store does not answer (rank 0, which hosts it, may be dead or cut off); "
                                        "ending this process (exit code 124) so that a restart can take over")) in [
        (124, True), (75, False)], far_line
    assert far_code == 124 or f"the machine at {machines[0].address} went away" in far_line, far_line


def test_torchrun_elastic_over_1_to_2_machines_goes_on_with_the_one_left_training_every_sample_of_the_epoch_once(
        machines, tmp_path):
    elastic = ["-m", "torch.distributed.run", "--nnodes", "1:2", "--nproc_per_node", 1, "--max-restarts", 1,
               "--rdzv_backend", "c10d", "--rdzv_endpoint", f"{machines[0].hostname}:29400", "--rdzv_id", "job",
               "--rdzv_conf", "last_call_timeout=1"]
    record = tmp_path / "record"
    record.mkdir()
    job = [TINY, *JOB[4:], "--shards", numbered_shards(tmp_path / "shards", n=TRAIN_SIZE), "--record", record,
           "--resume", "auto", "--hang-on-rank", "1:6", "--timeout", 60, "--work-dir", tmp_path / "work",
           "--out", tmp_path / "w.pt"]
    processes = [machines.python(m, [*elastic, *job], tmp_path / f"run{m.index}.log") for m in machines]
    wait_for_checkpoint(tmp_path, processes)
    time.sleep(1)
    machines.kill(machines[1])
    code, log = results(tmp_path, processes[:1], timeout=180)[0]
    assert code == 0, log[-3000:]
    assert "last.pth was written by 2 process(es), this run has 1" in log  # restarted on machine 0 alone, resumed
    assert load_result(tmp_path / "w.pt")["logs"]["epoch"] == 1  # and trained to the end (epochs 0 and 1)
    # epoch 0: what the 2 machines trained up to the checkpoint, then the one left: every sample once
    batches = [json.loads(line) for path in sorted(record.glob("rank*.jsonl")) for line in path.read_text().split("\n")
               if line]
    after = [b for b in batches if b["processes"] == 1 and b["epoch"] == 0]
    consumed = min(b["batch"] for b in after) * 8  # the one left starts where both together stopped
    before = [i for b in batches if b["processes"] == 2 and b["epoch"] == 0 and b["batch"] < consumed // 16
              for i in b["indices"]]
    assert 0 < len(before) == consumed < TRAIN_SIZE
    assert sorted(before + [i for b in after for i in b["indices"]]) == list(range(TRAIN_SIZE))
