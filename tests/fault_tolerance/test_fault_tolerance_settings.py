"""The fault_tolerance and local_sgd mode diloco settings: what they read, and what is refused before anything is
built, in one line; the torchft extra missing; a process that belongs to no replica group."""
import importlib.util

import pytest
import torch

from basetrainer.engine.options import LoopOptions
from basetrainer.errors import ConfigError, TrainingAlreadyFinished
from basetrainer.fault_tolerance import DiLoCoOptions, FaultTolerance, start_replica_groups
from basetrainer.fault_tolerance.replica_groups import import_torchft

CPU = torch.device("cpu")
GROUPS = {"replica_groups": 2}


def options(**cfg):
    return LoopOptions.from_config(cfg, CPU)


def test_fault_tolerance_is_off_by_default_and_reads_its_fields():
    assert not options().fault_tolerance.enabled
    read = options(fault_tolerance={"replica_groups": 3, "min_replicas": 2, "lighthouse": "host:29510"}).fault_tolerance
    assert (read.replica_groups, read.min_replicas, read.lighthouse, read.commit_every) == (3, 2, "host:29510", 1)


def test_diloco_reads_its_outer_optimizer_and_fragments_and_commits_every_period_over_fragments_steps():
    read = options(fault_tolerance=GROUPS, local_sgd={"mode": "diloco", "period": 8, "fragments": 2,
                                                      "fragment_sync_delay": 1, "outer_lr": 0.5}).fault_tolerance
    assert read.diloco == DiLoCoOptions(8, 0.5, 0.9, True, 2, 1)
    assert read.commit_every == 4


def test_diloco_leaves_ddps_own_local_sgd_off():
    read = options(fault_tolerance=GROUPS, local_sgd={"mode": "diloco", "period": 4})
    assert not read.communication.enabled


@pytest.mark.parametrize("cfg, named", [
    ({"local_sgd": {"mode": "diloco", "period": 4}}, "fault_tolerance.replica_groups"),
    ({"fault_tolerance": {"replica_groups": 2, "min_replicas": 3}}, "min_replicas"),
    ({"fault_tolerance": {"replica_groups": 2, "group_id": 2}}, "group_id 2"),
    ({"fault_tolerance": GROUPS, "local_sgd": {"period": 4}}, "mode: diloco"),
    ({"fault_tolerance": GROUPS, "local_sgd": {"mode": "diloco"}}, "local_sgd.period"),
    ({"fault_tolerance": GROUPS, "local_sgd": {"mode": "diloco", "period": 6, "fragments": 4}}, "multiple"),
    ({"fault_tolerance": GROUPS, "local_sgd": {"mode": "diloco", "period": 4, "fragments": 2,
                                               "fragment_sync_delay": 2}}, "fragment_sync_delay"),
    ({"fault_tolerance": GROUPS, "local_sgd": {"mode": "diloco", "period": 4, "warmup_steps": 2}}, "warmup_steps"),
    ({"fault_tolerance": GROUPS, "accumulate_grad_batches": 2}, "accumulate_grad_batches"),
    ({"fault_tolerance": GROUPS, "strategy": "fsdp"}, "strategy: ddp"),
    ({"fault_tolerance": GROUPS, "parallel": {"mesh": {"tp": 2}}}, "tensor or pipeline"),
    ({"fault_tolerance": GROUPS, "grad_compression": "bf16"}, "grad_compression: none"),
    ({"fault_tolerance": {"replica_groups": 2, "lighthouse": "nowhere"}}, "lighthouse"),
])
def test_what_cannot_work_with_replica_groups_is_refused_in_one_line_naming_the_fix(cfg, named):
    with pytest.raises(ConfigError) as refused:
        options(**cfg)
    assert named in str(refused.value) and "\n" not in str(refused.value)


def test_a_process_no_supervisor_started_is_told_how_to_join(monkeypatch):
    for name in ("BASETRAINER_REPLICA_GROUP", "BASETRAINER_LIGHTHOUSE", "BASETRAINER_REPLICA_GROUP_RESTARTS"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="launch()"):
        start_replica_groups(options(fault_tolerance=GROUPS), CPU, {})
    with pytest.raises(ConfigError, match="lighthouse's address"):
        start_replica_groups(options(fault_tolerance={"replica_groups": 2, "group_id": 1}), CPU, {})


def test_without_torchft_the_error_names_the_pip_command(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchft" else find_spec(name, *a))
    with pytest.raises(ConfigError, match=r'pip install "basetrainer\[torchft\]"'):
        import_torchft()


@pytest.mark.parametrize("resume, files_since", [(None, 1795000000.25), ("auto", None)])
def test_a_job_started_afresh_resumes_only_its_own_checkpoints_one_that_continues_any(monkeypatch, tmp_path,
                                                                                     resume, files_since):
    pytest.importorskip("torchft")
    monkeypatch.setenv("BASETRAINER_REPLICA_GROUP", "1")
    monkeypatch.setenv("BASETRAINER_LIGHTHOUSE", "http://localhost:1")
    monkeypatch.setenv("BASETRAINER_REPLICA_GROUP_RESTARTS", "1")
    monkeypatch.setenv("BASETRAINER_REPLICA_JOB_STARTED", "1795000000.25")
    monkeypatch.setenv("BASETRAINER_REPLICA_JOB_FINISHED", str(tmp_path / "finished"))
    cfg = {"fault_tolerance": GROUPS, "work_dir": str(tmp_path), "resume": resume}
    groups, read = start_replica_groups(options(**cfg), CPU, cfg)
    assert (groups.files_since, read.resume) == (files_since, "auto")
    assert groups.finished_marker == str(tmp_path / "finished")


def test_a_group_that_starts_after_another_finished_the_training_stops_before_building_anything(monkeypatch, tmp_path):
    pytest.importorskip("torchft")
    monkeypatch.setenv("BASETRAINER_REPLICA_GROUP", "1")
    monkeypatch.setenv("BASETRAINER_LIGHTHOUSE", "http://localhost:1")
    monkeypatch.setenv("BASETRAINER_REPLICA_GROUP_RESTARTS", "1")
    monkeypatch.setenv("BASETRAINER_REPLICA_JOB_FINISHED", str(tmp_path / "finished"))
    (tmp_path / "finished").touch()  # the supervisor's file: group 0 finished
    cfg = {"fault_tolerance": GROUPS, "work_dir": str(tmp_path)}
    with pytest.raises(TrainingAlreadyFinished) as stopped:
        start_replica_groups(options(**cfg), CPU, cfg)
    assert stopped.value.exit_code == 0


def test_each_group_writes_its_own_run_directory_and_a_restarted_one_resumes(monkeypatch, tmp_path):
    pytest.importorskip("torchft")
    monkeypatch.setenv("BASETRAINER_REPLICA_GROUP", "1")
    monkeypatch.setenv("BASETRAINER_LIGHTHOUSE", "http://localhost:1")
    monkeypatch.setenv("BASETRAINER_REPLICA_GROUP_RESTARTS", "2")
    cfg = {"fault_tolerance": GROUPS, "work_dir": str(tmp_path)}
    groups, read = start_replica_groups(options(**cfg), CPU, cfg)
    assert groups.group_id == 1 and groups.lighthouse == "http://localhost:1"
    assert cfg["work_dir"] == read.work_dir == str(tmp_path / "replica_groups" / "1")
    assert read.resume == "auto"
    assert FaultTolerance() == options().fault_tolerance
