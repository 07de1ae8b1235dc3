"""Replica groups across 2 machines, started as the fault-tolerance guide tells a cluster's user: the lighthouse
(``torchft_lighthouse``) on machine 0, group 0 on machine 0 and group 1 on machine 1, each with
``fault_tolerance.group_id`` and ``lighthouse: http://m0:29510`` (machine 0's host name, which resolves to loopback
on machine 0 itself). Machine 1 is killed mid-run (every process in it at once); group 0 goes on alone, its steps
committed and recorded; group 1 is started again on machine 1, as the scheduler would, takes group 0's training
state from memory across the link, and both end at the same step with the same parameters and buffers.

One job of ``support/workers/replica_group_worker.py`` (the toy classifier with BatchNorm, 0.05 s a step, 0.3 s
while a group is missing, so that group 1 is back before group 0 ends whatever its start costs), shared by the
tests, which assert on its records, never on timings.
"""
import json

import pytest

from support import WORKERS
from support.processes import wait_until

pytestmark = pytest.mark.slow
pytest.importorskip("torchft")

WORKER = WORKERS / "replica_group_worker.py"
LIGHTHOUSE_PORT = 29510
STEPS = 120  # enough for group 1's restart on a loaded machine: alone, group 0 takes 0.3 s a step
KILLED_AFTER, ALONE_BEFORE_RESTART = 4, 3  # group 1's committed steps before the kill; group 0's alone after it


def lighthouse(machines, root):
    """``torchft_lighthouse`` on machine 0, as the guide starts it."""
    return machines.lighthouse(machines[0], LIGHTHOUSE_PORT, root / "lighthouse.log")


def start_group(machines, root, group: int, attempt: int):
    settings = {"fault_tolerance": {"replica_groups": 2, "group_id": group, "timeout": 30,
                                    "lighthouse": f"http://{machines[0].hostname}:{LIGHTHOUSE_PORT}"},
                "num_epochs": None, "max_iters": STEPS, "step_seconds": 0.05, "step_seconds_alone": 0.3,
                "attempt": attempt}
    return machines.python(machines[group], [WORKER, root, json.dumps(settings)], root / f"group{group}.{attempt}.log",
                           env={"RUST_LOG": "warn"})


def records(root, group: int) -> list:
    path = root / f"group{group}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_for(condition, processes, root, what: str):
    """Until ``condition()`` holds, every process still running; else the processes that ended and every log."""
    def explain():
        ended = {p.args[-1]: p.poll() for p in processes if p.poll() is not None}
        return f"{what}: {ended or 'timed out'}; " + "; ".join(
            f"{log.name}: {log.read_text()[-1500:]}" for log in sorted(root.glob("*.log")))

    wait_until(condition, processes, 120, explain)


@pytest.fixture(scope="module")
def job(machines, tmp_path_factory):
    root = tmp_path_factory.mktemp("groups_across_machines")
    beacon = lighthouse(machines, root)
    first = [start_group(machines, root, group, 0) for group in (0, 1)]
    wait_for(lambda: sum(line["committed"] for line in records(root, 1)) >= KILLED_AFTER, [beacon, *first], root,
             "both groups training")
    machines.kill(machines[1])
    killed_at = len(records(root, 1))
    wait_for(lambda: sum(line["alive"] == 1 and line["committed"] for line in records(root, 0))
             >= ALONE_BEFORE_RESTART, [beacon, first[0]], root, "group 0 going on alone")
    restarted = start_group(machines, root, 1, 1)
    codes = [first[0].wait(timeout=180), restarted.wait(timeout=60)]
    logs = {log.name: log.read_text() for log in root.glob("*.log")}
    beacon.kill()
    return {"codes": codes, "logs": logs, "groups": [records(root, 0), records(root, 1)], "killed_at": killed_at}


def test_each_group_says_it_takes_the_interface_that_reaches_the_lighthouse_not_its_host_name_s_loopback(
        job, machines):
    for group, log in ((0, "group0.0.log"), (1, "group1.0.log"), (1, "group1.1.log")):
        assert (f"replica group {group}: gloo on eth0 ({machines[group].address}), which reaches the lighthouse m0"
                in job["logs"][log]), job["logs"][log][-3000:]


def test_both_groups_train_together_across_the_machines_before_the_kill(job):
    group0, group1 = job["groups"]
    before = group1[:job["killed_at"]]
    assert before and {line["alive"] for line in before} == {2}
    assert {line["attempt"] for line in group0} == {0}
    weights = {line["step"]: line["weights"] for line in group0 if line["committed"]}
    assert all(weights[line["step"]] == line["weights"] for line in before if line["committed"])


def test_group_0_goes_on_alone_while_machine_1_is_down_and_its_steps_count(job):
    assert job["codes"][0] == 0, job["logs"]["group0.0.log"][-3000:]
    survivor = job["groups"][0]
    steps = [line["step"] for line in survivor if line["committed"]]
    assert steps == list(range(1, len(steps) + 1)) and steps[-1] == STEPS  # every step once, in order, to the end
    alone = [line for line in survivor if line["alive"] == 1]
    assert len([line for line in alone if line["committed"]]) >= ALONE_BEFORE_RESTART
    assert [line["alive"] for line in survivor[-3:]] == [2, 2, 2]  # and with group 1 again at the end


def test_group_1_started_again_on_machine_1_takes_group_0_s_state_from_memory_and_trains_alike(job):
    assert job["codes"][1] == 0, job["logs"]["group1.1.log"][-3000:]
    group0, group1 = job["groups"]
    restarted = [line for line in group1 if line["attempt"] == 1]
    assert restarted and restarted[0]["healed_in"] is not None  # it healed from a live group
    assert "took the training state of replica group 0" in job["logs"]["group1.1.log"]
    first = restarted[0]["step"]
    assert first > group1[job["killed_at"] - 1]["step"] + ALONE_BEFORE_RESTART  # where group 0 was, not where it left
    weights = {line["step"]: line["weights"] for line in group0 if line["committed"]}
    assert all(weights[line["step"]] == line["weights"] for line in restarted if line["committed"])


def test_the_groups_end_at_the_same_step_with_identical_parameters_and_buffers(job):
    group0, group1 = job["groups"]
    last0, last1 = group0[-1], group1[-1]
    assert last0["step"] == last1["step"] == STEPS
    assert (last0["weights"], last0["buffers"], last0["own"]) == (last1["weights"], last1["buffers"], last1["own"])
