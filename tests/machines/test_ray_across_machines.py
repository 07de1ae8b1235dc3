"""A Ray cluster of 2 machines, started as the running guide says: ``ray start --head`` on machine 0, ``ray start
--address`` on machine 1 (2 CPUs each, every node given its own address, the same token everywhere).
``basetrainer train --ray 4``, typed on machine 0, trains what ``basetrainer train --distributed`` trains in 4
processes, bitwise; a main(cfg) run through ``fit`` in 4 Ray workers trains as ``launch`` with 4 processes does; and
when machine 1 dies mid-run and comes back (``ray start --address`` again, as an operator or an autoscaler would),
Ray Train starts the group again, the run resumes from the last checkpoint reported and ends with the weights of a
run never killed. Each worker gives gloo the interface that reaches the first worker's node, not the loopback
address of its host name; a shell without the cluster's token is refused in one line.

One cluster for the module. On it, first the task's command, then the main (support/workers/ray_main.py: the toy
trainer for 3 epochs of 2 steps, last.pth at each epoch's end; on its first attempt every rank stops after step 3,
in epoch 2, and machine 1 is killed while they wait). The references (the task's command with 4 processes, launch()
of the main with 4) run in this process's namespace, beside the cluster's start and restart. Ray's storage and the
runs' folders are under the module's tmp_path, which every machine sees (as a shared file system); each node's
temporary folder is a short one of /tmp, removed with the cluster.
"""
import importlib.util
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
import torch

from basetrainer.distributed.launch import launch
from support import TESTS
from support.compare import same_weights
from support.processes import python_env, wait_until
from support.toy import toy_cfg
from support.workers import ray_main

pytestmark = pytest.mark.slow

WORKERS, CPUS_PER_MACHINE, PORT = 4, 2, 6379
EPOCHS, STEPS_PER_EPOCH = 3, 2  # the toy's 8 batches an epoch over 4 workers
PAUSE_AT_STEP = 3  # in epoch 2, after epoch 1's checkpoint
# The quick start's task, briefly: 3 steps of batches of 16 at 16x16, on the digits written on first use.
TASK = ["--no-progress", "max_iters=3", "batch_size=16", "input_size=[16,16]"]


class Cluster:
    """The Ray nodes started on the module's machines; each node's log is ``root/node<i>.log``, its temporary
    folder one of /tmp (Ray's socket paths may not exceed 107 bytes)."""

    def __init__(self, machines, root):
        self.machines, self.root = machines, root
        self.address = f"{machines[0].address}:{PORT}"
        self.env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),  # as `ray start` would make
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
                    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2",  # Ray's controller polls its workers this often
                    # every worker's lines: Ray folds those differing only in words with digits (the gloo lines)
                    "RAY_DEDUP_LOGS": "0"}
        self.folders, self.started = [], 0

    def start_node(self, machine, timeout=120):
        """``ray start`` on ``machine`` (the head on machine 0), until it says it runs."""
        folder = tempfile.mkdtemp(prefix="ray", dir="/tmp")
        self.folders.append(folder)
        role = ["--head", "--port", PORT, "--include-dashboard=false"] if machine.index == 0 else [
            "--address", self.address]
        log = self.root / f"node{self.started}.log"
        self.started += 1
        self.run(machine, ["-m", "ray.scripts.scripts", "start", *role, "--node-ip-address", machine.address,
                           "--num-cpus", CPUS_PER_MACHINE, "--temp-dir", folder, "--disable-usage-stats", "--block"],
                 log)
        wait_until(lambda: "Ray runtime started" in log.read_text(), timeout=timeout,
                   explain=lambda: log.read_text()[-3000:])

    def run(self, machine, args, log, cwd=TESTS, **env) -> subprocess.Popen:
        """``python args...`` on ``machine`` as a user of the cluster runs it there (RAY_ADDRESS, the token; ``env``
        changes them)."""
        return self.machines.python(machine, args, log, env={**self.env, "RAY_ADDRESS": self.address, **env},
                                    cwd=cwd)

    def stop(self):
        for machine in self.machines:
            self.machines.kill(machine)
        for folder in self.folders:
            shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(machines, tmp_path_factory):
    made = Cluster(machines, tmp_path_factory.mktemp("ray_cluster"))
    try:
        for machine in machines:
            made.start_node(machine)
        yield made
    finally:
        made.stop()


@pytest.fixture(scope="module")
def task_on_processes(tmp_path_factory):
    """The task's command in 4 processes here, started before the cluster and running beside its start: ``(its
    folder, the process)``; its work_dir ``folder/task_processes``, its output ``folder/processes.log``."""
    root = tmp_path_factory.mktemp("task_processes")
    with open(root / "processes.log", "w") as output:
        process = subprocess.Popen([sys.executable, shutil.which("basetrainer"), "train", "--distributed", "--gpu_id",
                                    *map(str, range(WORKERS)), "--work_dir", root / "task_processes", *TASK],
                                   cwd=root, env=python_env(), stdout=output, stderr=subprocess.STDOUT)
    yield root, process
    if process.poll() is None:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def task_runs(task_on_processes, cluster, tmp_path_factory):
    """The task's command on the cluster (``--ray 4``, from machine 0), in 4 processes here, and on the cluster
    from a shell without the token: ``{name: (exit code, output, work_dir)}``."""
    root = tmp_path_factory.mktemp("task")

    def on_ray(name, **env):
        command = [shutil.which("basetrainer"), "train", "--ray", WORKERS, "--work_dir", root / f"task_{name}", *TASK]
        return cluster.run(cluster.machines[0], command, root / f"{name}.log", cwd=root, **env)

    def finish(name, process, folder=root):
        return process.wait(timeout=300), (folder / f"{name}.log").read_text(), folder / f"task_{name}"

    no_token = None
    if importlib.util.find_spec("ray._private.authentication") is not None:  # a Ray with token authentication
        no_token = on_ray("no_token", RAY_AUTH_MODE="disabled", RAY_AUTH_TOKEN="")  # a shell not given the token
    folder, processes = task_on_processes
    runs = {"ray": finish("ray", on_ray("ray")), "processes": finish("processes", processes, folder)}
    runs["no_token"] = no_token and finish("no_token", no_token)
    return runs


@pytest.fixture(scope="module")
def machine_lost(cluster, tmp_path_factory):
    """``(what fit returned, the Ray run's out folder, launch()'s out folder)``: the main in 4 Ray workers, machine
    1 killed while every rank waits after step 3 and Ray holds epoch 1's checkpoint, then machine 1's node started
    again; launch() of it in 4 processes here."""
    root = tmp_path_factory.mktemp("machine_lost")
    ray_out, launch_out = root / "ray_out", root / "launch_out"
    ray_out.mkdir(), launch_out.mkdir()
    settings = {"cfg": toy_cfg(num_epochs=EPOCHS, work_dir=str(root / "ray_run"), out=str(ray_out),
                               pause_at_step=PAUSE_AT_STEP),
                "num_workers": WORKERS, "max_failures": 1, "storage_path": str(root / "storage")}
    (root / "settings.json").write_text(json.dumps(settings))
    driver = cluster.run(cluster.machines[0], ["-m", "support.workers.ray_main", root / "settings.json"],
                         root / "driver.log")
    def driver_log():
        return (root / "driver.log").read_text()[-3000:]

    deadline = time.monotonic() + 240
    wait_until(lambda: len(list(ray_out.glob("paused_rank*"))) == WORKERS, [driver], 240, driver_log)
    # and Ray's controller has taken epoch 1's checkpoint: it writes its checkpoint manager's snapshot then
    wait_until(lambda: any((root / "storage").glob("*/checkpoint_manager_snapshot.json")), [driver],
               deadline - time.monotonic(), driver_log)
    cluster.machines.kill(cluster.machines[1])
    cluster.start_node(cluster.machines[1])
    launch(ray_main.main, WORKERS, distributed=True,  # while Ray finds the workers lost and starts them again
           args=(toy_cfg(num_epochs=EPOCHS, work_dir=str(root / "launch_run"), out=str(launch_out)),))
    code = driver.wait(timeout=300)
    assert code == 0, (root / "driver.log").read_text()[-3000:]
    return json.loads((ray_out / "result.json").read_text()), ray_out, launch_out


def weights(folder, epoch):
    return torch.load(folder / f"epoch{epoch}.pt", weights_only=True)


def test_the_tasks_command_on_two_machines_trains_what_four_processes_train(task_runs):
    trained = ("ray", "processes")
    for name in trained:
        code, output, _ = task_runs[name]
        assert code == 0, f"{name}: {output[-3000:]}"
    plan = "3 steps of batches of 16 per process, 64 over 4 processes"
    logs = {name: (task_runs[name][2] / "log" / "train.log").read_text() for name in trained}
    assert all(plan in log for log in logs.values()), logs["ray"][-3000:]
    final = {name: torch.load(task_runs[name][2] / "model" / "model_final.pth", weights_only=True)
             for name in trained}
    assert same_weights(final["ray"], final["processes"])


def test_each_worker_takes_for_gloo_the_interface_reaching_the_first_workers_node_and_says_so(task_runs, machines):
    output = task_runs["ray"][1]
    for machine in machines:
        assert f"gloo on eth0 ({machine.address}), which reaches the rendezvous host" in output, output[-3000:]


def test_a_shell_without_the_clusters_token_is_refused_in_one_line_before_any_work(task_runs, cluster):
    if task_runs["no_token"] is None:
        pytest.skip("this Ray has no token authentication")
    code, output, work_dir = task_runs["no_token"]
    assert code == 2, output[-3000:]
    last = output.strip().splitlines()[-1]
    assert last.startswith(f"error: could not join the Ray cluster at {cluster.address} (RPC error: InvalidAuthToken: "
                           f"Authentication token is missing or incorrect); check RAY_ADDRESS"), last
    assert not work_dir.exists()


def test_ray_workers_on_two_machines_train_bitwise_as_launch_with_four_processes(machine_lost):
    _, ray_out, launch_out = machine_lost
    assert same_weights(weights(ray_out, 1), weights(launch_out, 1))  # epoch 1: the first attempt, before the kill


def test_a_machine_lost_and_back_restarts_the_group_which_resumes_and_ends_as_a_run_never_killed(machine_lost):
    result, ray_out, launch_out = machine_lost
    assert result["error"] is None
    assert sorted(path.name for path in ray_out.glob("started_at_*")) == ["started_at_epoch0", "started_at_epoch1"]
    assert same_weights(weights(ray_out, EPOCHS), weights(launch_out, EPOCHS))


def test_ray_holds_the_last_checkpoint_and_metrics_reported(machine_lost):
    result, _, _ = machine_lost
    assert (result["metrics"]["epoch"], result["metrics"]["step"]) == (EPOCHS, STEPS_PER_EPOCH * EPOCHS)
    assert result["checkpoint_epoch"] == EPOCHS
