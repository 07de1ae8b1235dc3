"""basetrainer.integrations.ray on a local Ray cluster of 2 CPUs: the same main(cfg) in 2 Ray Train workers trains
as launch() with 2 processes does, bitwise, and a worker that kills itself mid-run is restarted by Ray, resumes
from the last reported checkpoint and ends with the weights of a run never killed; and the classification task's
own command, ``basetrainer train --ray 2``, trains what ``basetrainer train --distributed --gpu_id 0 1`` trains.

One cluster for the module. On it, one Ray run of a main (support/workers/ray_main.py, the toy trainer for 3 epochs
of 4 steps, last.pth at each epoch's end, rank 1 killed after step 6 on the first attempt), and one
``basetrainer train --ray 2``, which joins the cluster through RAY_ADDRESS; then launch() of the same main and the
task's command with 2 processes, to compare with. Ray's storage is under the module's tmp_path, its temporary
folder a short one of /tmp; both go with the cluster.
"""
import os
import shutil
import tempfile

import pytest
import torch

from basetrainer.distributed.launch import launch
from basetrainer.integrations.ray import fit
from support import TESTS
from support.processes import run_command
from support.toy import toy_cfg
from support.workers import ray_main

EPOCHS, KILL_AT_STEP = 3, 6  # 4 steps per epoch: the kill comes in epoch 2, after epoch 1's checkpoint
# The quick start's task, briefly: 3 steps of batches of 16 at 16x16, on the digits written on first use.
TASK = ["--no-progress", "max_iters=3", "batch_size=16", "input_size=[16,16]"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``(Ray's Result, the Ray run's out folder, launch()'s out folder, the task's two runs)``: the task's runs are
    ``{"ray": CompletedProcess, "processes": CompletedProcess}``, their work_dirs ``root/task_<name>``."""
    import ray

    root = tmp_path_factory.mktemp("ray")
    ray_out, launch_out = root / "ray_out", root / "launch_out"
    ray_out.mkdir(), launch_out.mkdir()
    task_runs = {}
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
        env.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.2")  # Ray's controller polls its workers this often
        # Ray's socket paths go under its temporary folder, and a socket path may not exceed 107 bytes: a short
        # folder of /tmp, not pytest's (under xdist, /tmp/pytest-of-root/pytest-N/popen-gwK/... is too long).
        temporary = tempfile.mkdtemp(prefix="ray", dir="/tmp")
        cluster = ray.init(num_cpus=2, include_dashboard=False, _temp_dir=temporary)
        try:
            result = fit(ray_main.main, toy_cfg(num_epochs=EPOCHS, work_dir=str(root / "ray_run"), out=str(ray_out),
                                                kill_at_step=KILL_AT_STEP, kill_marker=str(root / "killed")),
                         num_workers=2, max_failures=1, storage_path=str(root / "storage"))
            task_runs["ray"] = run_command(["basetrainer", "train", "--ray", "2", "--work_dir", root / "task_ray", *TASK],
                                           env={"RAY_ADDRESS": cluster.address_info["address"]}, cwd=root, timeout=300)
        finally:
            ray.shutdown()
            shutil.rmtree(temporary, ignore_errors=True)
    launch(ray_main.main, 2, distributed=True,
           args=(toy_cfg(num_epochs=EPOCHS, work_dir=str(root / "launch_run"), out=str(launch_out)),))
    task_runs["processes"] = run_command(["basetrainer", "train", "--distributed", "--gpu_id", "0", "1",
                                          "--work_dir", root / "task_processes", *TASK], cwd=root)
    return result, ray_out, launch_out, root, task_runs


def weights(folder, epoch):
    return torch.load(folder / f"epoch{epoch}.pt", weights_only=True)


def same(first, second):
    return first.keys() == second.keys() and all(torch.equal(first[key], second[key]) for key in first)


def test_ray_workers_train_bitwise_as_launch_with_2_processes(runs):
    result, ray_out, launch_out, _, _ = runs
    assert same(weights(ray_out, 1), weights(launch_out, 1))  # epoch 1: the first attempt, before the kill


def test_a_killed_worker_is_restarted_resumes_from_the_reported_checkpoint_and_ends_as_a_run_never_killed(runs):
    result, ray_out, launch_out, _, _ = runs
    assert result.error is None
    assert sorted(path.name for path in ray_out.glob("started_at_*")) == ["started_at_epoch0", "started_at_epoch1"]
    assert same(weights(ray_out, EPOCHS), weights(launch_out, EPOCHS))


def test_ray_holds_the_last_checkpoint_and_metrics_reported(runs):
    result, _, _, _, _ = runs
    assert (result.metrics["epoch"], result.metrics["step"]) == (EPOCHS, 4 * EPOCHS)
    with result.checkpoint.as_directory() as folder:
        assert torch.load(os.path.join(folder, "last.pth"), weights_only=False)["epoch"] == EPOCHS


def test_the_tasks_command_under_ray_shards_the_data_and_trains_what_two_processes_train(runs):
    _, _, _, root, task_runs = runs
    for name, run in task_runs.items():
        assert run.returncode == 0, f"{name}: {run.stderr[-3000:]}"
    plan = "3 steps of batches of 16 per process, 32 over 2 processes (44 per epoch)"  # 1438 digits: 719 a process
    logs = {name: (root / f"task_{name}" / "log" / "train.log").read_text() for name in task_runs}
    assert all(plan in log for log in logs.values()), logs["ray"][-3000:]
    final = {name: torch.load(root / f"task_{name}" / "model" / "model_final.pth", weights_only=True)
             for name in task_runs}
    assert same(final["ray"], final["processes"])
