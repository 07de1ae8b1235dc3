"""Replica groups as processes (basetrainer.distributed.replica_groups, .lighthouse): the supervisor launch() becomes
for a config with fault_tolerance.replica_groups, the lighthouse it serves, and which groups it restarts.

The slow tests share two jobs of a script that calls launch() with such a config: 2 groups of 2 gloo processes
each, whose last process of group 1 SIGKILLs itself at the group's first start; and 2 groups of one process, group 0
SIGKILLing itself at every start and group 1 ending with a ConfigError. Each process records which group, restart
and rank it is, the sum of an all-reduce over its own process group and whether the lighthouse answered. The fast
tests check, in this process, what is restarted, the environment a group reads, when launch() supervises, the
command run again and the lighthouse.
"""
import json
import os
import signal
import sys
import textwrap
import types
import urllib.error
import urllib.request

import pytest

from basetrainer.distributed import failures
from basetrainer.distributed.lighthouse import serving_lighthouse
from basetrainer.distributed.replica_groups import (
    DEFAULT_SETTINGS,
    Supervisor,
    is_restarted,
    replica_group_from_environment,
    replica_job_from_environment,
    rerun_command,
    settings_to_supervise,
)
from basetrainer.engine.settings import FAULT_TOLERANCE
from basetrainer.errors import ConfigError, LaunchError
from support.processes import run_python

JOB = textwrap.dedent('''
    import json, os, signal, sys, time, urllib.request

    import torch
    import torch.distributed as dist

    from basetrainer.distributed.launch import launch
    from basetrainer.distributed.replica_groups import replica_group_from_environment
    from basetrainer.errors import ConfigError


    def main(config, out, mode):
        group, lighthouse, restarts = replica_group_from_environment()
        rank, world_size = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
        group_sum = torch.tensor([group + 1.0])
        if dist.is_initialized():
            dist.all_reduce(group_sum)
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(lighthouse, timeout=30) as page:
            answered = page.status
        with open(os.path.join(out, f"{group}.{restarts}.{rank}.json"), "w") as record:
            json.dump({"group_sum": group_sum.item(), "lighthouse": lighthouse, "answered": answered}, record)
        if mode == "kill_once" and (group, restarts, rank) == (1, 0, world_size - 1):
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "kill_once" and group == 0:  # still training when group 1 comes back: it is restarted then
            restarted = os.path.join(out, "1.1.0.json")
            for _ in range(1200):
                if os.path.exists(restarted):
                    break
                time.sleep(0.1)
        if mode == "fail" and group == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "fail" and group == 1:
            raise ConfigError("group 1's config is wrong")


    if __name__ == "__main__":
        out, mode, processes, max_restarts = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        config = {"fault_tolerance": {"replica_groups": 2, "max_restarts": max_restarts}}
        launch(main, processes, args=(config, out, mode))
''')


def run_job(folder, mode, processes, max_restarts):
    """Runs the job in ``folder``; returns its CompletedProcess and its records by (group, restarts, rank)."""
    folder.mkdir()
    (folder / "job.py").write_text(JOB)
    result = run_python([folder / "job.py", folder, mode, processes, max_restarts], timeout=180)
    records = {tuple(map(int, path.stem.split("."))): json.loads(path.read_text()) for path in folder.glob("*.json")}
    return result, records


@pytest.fixture(scope="module")
def killed_once(tmp_path_factory):
    """2 groups of 2 processes; group 1's rank 1 SIGKILLs itself at the group's first start (max_restarts 3), and
    group 0 runs until group 1 is back (a group that dies after another finished is not restarted)."""
    return run_job(tmp_path_factory.mktemp("replica_groups") / "killed_once", "kill_once", 2, 3)


@pytest.fixture(scope="module")
def failing(tmp_path_factory):
    """2 groups of one process: group 0 SIGKILLs itself at every start, group 1 raises a ConfigError; max_restarts 1."""
    return run_job(tmp_path_factory.mktemp("replica_groups") / "failing", "fail", 1, 1)


@pytest.mark.slow
def test_a_group_whose_process_is_killed_is_restarted_once_and_the_job_ends_well(killed_once):
    result, records = killed_once
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(records) == [(0, 0, 0), (0, 0, 1), (1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1)]
    assert "replica group 1 exited with code 1: restart 1 of 3" in result.stderr
    assert "restart 2 of 3" not in result.stderr and "replica group 0 exited" not in result.stderr
    assert ("[replica group 1] error: worker rank 1 was killed by SIGKILL without reporting an error; if nobody killed "
            "it, the machine perhaps ran out of memory") in result.stderr  # the group's own line: what died


@pytest.mark.slow
def test_the_processes_of_each_group_meet_in_a_process_group_of_their_own(killed_once):
    _, records = killed_once
    assert {key: record["group_sum"] for key, record in records.items()} == {
        (group, restarts, rank): 2.0 * (group + 1) for group, restarts, rank in records}


@pytest.mark.slow
def test_every_group_reaches_the_lighthouse_the_supervisor_serves_until_the_job_ends(killed_once):
    _, records = killed_once
    addresses = {record["lighthouse"] for record in records.values()}
    assert len(addresses) == 1 and {record["answered"] for record in records.values()} == {200}
    with pytest.raises(urllib.error.URLError):
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(addresses.pop(), timeout=5)


@pytest.mark.slow
def test_a_group_that_keeps_dying_is_restarted_max_restarts_times_then_the_job_fails_naming_it(failing):
    result, records = failing
    assert result.returncode == LaunchError.exit_code
    assert [key for key in sorted(records) if key[0] == 0] == [(0, 0, 0), (0, 1, 0)]
    assert "replica group 0 was killed by SIGKILL: restart 1 of 1" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: replica group(s) 0, 1 failed: group 0 was killed by SIGKILL after 1 restart(s), the most allowed "
        "(max_restarts); group 1 exited with code 2 (a user error: not restarted) (each group's own error is above)")


@pytest.mark.slow
def test_a_group_that_ends_with_a_user_error_is_not_restarted(failing):
    result, records = failing
    assert [key for key in sorted(records) if key[0] == 1] == [(1, 0, 0)]
    assert "error: group 1's config is wrong" in result.stderr


@pytest.mark.parametrize("exit_code", [1, 124, -signal.SIGKILL, -signal.SIGSEGV, 137])
def test_a_group_killed_or_failing_is_restarted(exit_code):
    assert is_restarted(exit_code)


@pytest.mark.parametrize("exit_code", [0, ConfigError.exit_code, 3, 75])
def test_a_group_that_succeeded_ended_with_a_user_error_or_saved_and_stopped_is_not_restarted(exit_code):
    assert not is_restarted(exit_code)


def test_a_worker_killed_without_an_error_ends_its_launcher_with_a_failure_a_supervisor_restarts():
    error = failures.worker_error(0, [types.SimpleNamespace(exitcode=-signal.SIGKILL)], [], [], 0, None)
    assert isinstance(error, LaunchError) and is_restarted(error.exit_code)
    assert str(error) == ("worker rank 0 was killed by SIGKILL without reporting an error; if nobody killed it, the "
                          "machine perhaps ran out of memory (the kernel's OOM killer sends SIGKILL)")


def test_a_worker_killed_without_a_word_is_the_failure_not_the_interruption_that_stopped_the_others():
    processes = [types.SimpleNamespace(exitcode=1), types.SimpleNamespace(exitcode=-signal.SIGKILL)]
    stopped = [(2.0, 0, "KeyboardInterrupt", "", "Traceback ...")]  # rank 0, interrupted once rank 1 had died
    error = failures.worker_error(1, processes, [], stopped, 0, None)
    assert str(error).startswith("worker rank 1 was killed by SIGKILL without reporting an error")


def test_in_a_replica_group_a_worker_s_failure_is_one_line_and_restarts_the_group(monkeypatch):
    monkeypatch.setenv("BASETRAINER_REPLICA_GROUP", "1")
    reports = [(1.0, 0, "RuntimeError", "Connection closed by peer\nmore", "Traceback ...")]
    error = failures.worker_error(0, [types.SimpleNamespace(exitcode=1)], [], reports, 0, None)
    assert str(error) == ("worker rank 0 failed with RuntimeError: Connection closed by peer (its traceback is in "
                          "the replica group's log/train.log)")
    assert is_restarted(error.exit_code)


def test_a_group_process_reads_its_group_lighthouse_and_restarts_from_the_environment(monkeypatch):
    monkeypatch.setenv("BASETRAINER_REPLICA_GROUP", "2")
    monkeypatch.setenv("BASETRAINER_LIGHTHOUSE", "http://node7:29510")
    monkeypatch.setenv("BASETRAINER_REPLICA_GROUP_RESTARTS", "1")
    assert replica_group_from_environment() == (2, "http://node7:29510", 1)


def test_a_process_no_supervisor_started_belongs_to_no_group(monkeypatch):
    for name in ("BASETRAINER_REPLICA_GROUP", "BASETRAINER_LIGHTHOUSE", "BASETRAINER_REPLICA_GROUP_RESTARTS",
                 "BASETRAINER_REPLICA_JOB_STARTED", "BASETRAINER_REPLICA_JOB_FINISHED"):
        monkeypatch.delenv(name, raising=False)
    assert replica_group_from_environment() == (None, None, 0)
    assert replica_job_from_environment() == (None, None)


def test_a_group_process_reads_when_its_job_started_and_the_file_that_says_it_finished(monkeypatch):
    monkeypatch.setenv("BASETRAINER_REPLICA_JOB_STARTED", "1795000000.25")
    monkeypatch.setenv("BASETRAINER_REPLICA_JOB_FINISHED", "/tmp/basetrainer-replica-job-x/finished")
    assert replica_job_from_environment() == (1795000000.25, "/tmp/basetrainer-replica-job-x/finished")


def test_when_a_group_finishes_the_training_the_supervisor_makes_the_file_that_stops_a_restarted_one(tmp_path):
    supervisor = Supervisor(["unused"], 2, "http://localhost:1", max_restarts=3)
    supervisor.finished_marker = str(tmp_path / "finished")
    finished = supervisor.groups[0]
    assert not os.path.exists(supervisor.finished_marker)
    finished.process = types.SimpleNamespace(returncode=0)
    supervisor._restarted(finished)
    assert os.path.exists(supervisor.finished_marker)


def test_a_group_number_in_the_environment_that_is_no_number_is_refused_in_one_line(monkeypatch):
    monkeypatch.setenv("BASETRAINER_REPLICA_GROUP", "one")
    with pytest.raises(LaunchError, match="BASETRAINER_REPLICA_GROUP='one' is not a whole number"):
        replica_group_from_environment()


@pytest.mark.parametrize("fault_tolerance", [None, {"replica_groups": 0}, {"replica_groups": 2, "group_id": 1}])
def test_launch_supervises_only_a_config_with_replica_groups_and_no_group_id(monkeypatch, fault_tolerance):
    monkeypatch.delenv("BASETRAINER_REPLICA_GROUP", raising=False)
    config = {"lr": 0.1} if fault_tolerance is None else {"fault_tolerance": fault_tolerance}
    assert settings_to_supervise(("first", config), 1) is None


def test_launch_supervises_replica_groups_with_the_defaults_a_config_leaves_out(monkeypatch):
    monkeypatch.delenv("BASETRAINER_REPLICA_GROUP", raising=False)
    settings = settings_to_supervise(({"fault_tolerance": {"replica_groups": 2, "max_restarts": 1}},), 1)
    assert settings == {**DEFAULT_SETTINGS, "replica_groups": 2, "max_restarts": 1}


def test_the_defaults_the_supervisor_fills_in_are_the_declared_ones():
    declared = FAULT_TOLERANCE.defaults()
    assert DEFAULT_SETTINGS == {key: declared[key] for key in DEFAULT_SETTINGS}


def test_a_group_process_the_supervisor_started_does_not_supervise_again(monkeypatch):
    monkeypatch.setenv("BASETRAINER_REPLICA_GROUP", "0")
    assert settings_to_supervise(({"fault_tolerance": {"replica_groups": 2}},), 1) is None


def test_replica_groups_without_a_group_id_under_torchrun_are_refused_in_one_line(monkeypatch):
    monkeypatch.delenv("BASETRAINER_REPLICA_GROUP", raising=False)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(LaunchError, match="^fault_tolerance.group_id is null in processes started by torchrun: .*"
                                          "start one job per group with fault_tolerance.group_id set"):
        settings_to_supervise(({"fault_tolerance": {"replica_groups": 2}},), 1)


def test_a_script_is_run_again_as_python_runs_it(monkeypatch, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    monkeypatch.setattr(sys, "argv", [str(script), "-c", "my.yaml", "lr=0.1"])
    assert rerun_command() == [sys.executable, str(script), "-c", "my.yaml", "lr=0.1"]


def test_a_module_is_run_again_with_python_dash_m_not_as_its_file(monkeypatch):
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name="basetrainer.__main__")
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", ["/site-packages/basetrainer/__main__.py", "train", "lr=0.1"])
    assert rerun_command() == [sys.executable, "-m", "basetrainer.__main__", "train", "lr=0.1"]


def test_python_dash_c_cannot_be_run_again_and_is_refused_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    monkeypatch.setattr(sys, "argv", ["-c"])
    with pytest.raises(LaunchError, match="by running this command again, and it is no script"):
        rerun_command()


def test_lighthouse_auto_is_served_on_a_free_port_and_shut_down_on_leaving(monkeypatch):
    monkeypatch.setenv("RUST_LOG", "warn")  # what serving it sets in this process otherwise, for good
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with serving_lighthouse(DEFAULT_SETTINGS) as first, serving_lighthouse(DEFAULT_SETTINGS) as second:
        assert first != second
        assert opener.open(first, timeout=10).status == opener.open(second, timeout=10).status == 200
    with pytest.raises(urllib.error.URLError):
        opener.open(first, timeout=5)


@pytest.mark.parametrize("given, address", [("http://node7:29510", "http://node7:29510"),
                                            ("node7:29510", "http://node7:29510")])
def test_a_lighthouse_given_is_joined_as_it_is_named(given, address):
    with serving_lighthouse({**DEFAULT_SETTINGS, "lighthouse": given}) as joined:
        assert joined == address


def test_after_a_group_finished_the_training_a_group_that_dies_is_neither_restarted_nor_a_failure():
    supervisor = Supervisor(["unused"], 2, "http://localhost:1", max_restarts=3)
    finished, killed = supervisor.groups
    finished.process, killed.process = types.SimpleNamespace(returncode=0), types.SimpleNamespace(returncode=-9)
    assert not supervisor._restarted(finished) and not supervisor._restarted(killed)
    assert killed.restarts == 0
    supervisor.check_outcome()  # the job ends well: its training is done


def test_a_group_still_running_long_after_another_finished_the_training_is_stopped_and_no_failure():
    supervisor = Supervisor(["unused"], 2, "http://localhost:1", max_restarts=3, straggler_seconds=0)
    finished, straggler = supervisor.groups
    stopped = []
    finished.process = types.SimpleNamespace(returncode=0)
    straggler.process = types.SimpleNamespace(returncode=None, terminate=lambda: stopped.append(True))
    supervisor._restarted(finished)
    supervisor._stop_stragglers([straggler])
    supervisor._stop_stragglers([straggler])  # once only
    assert stopped == [True]
    straggler.process.returncode = 75  # it saved and stopped
    assert not supervisor._restarted(straggler)
    supervisor.check_outcome()
