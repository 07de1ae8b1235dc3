"""Replica groups through torchft, end to end: groups SIGKILLed between steps, during the gradient all-reduce
and during a DiLoCo sync; the others go on, the restarted group takes their state from memory and trains alike.

Five jobs of ``support/workers/replica_group_worker.py`` (2 groups of one gloo process, started by launch(), which
serves the lighthouse and restarts a dead group), shared by the tests:

- *averaging*: 8 epochs of 192 samples, batches of 8, 0.05 s a step (0.3 s while a group is missing, so that the
  restarted group is back before the end however slow its start); group 1 SIGKILLs itself after its 6th step, and on its restart in the
  all-reduce of the step after its 6th;
- *restarted whole*: the same job run again for one more epoch with ``resume: auto``, once it has ended: every group
  resumes from its own last checkpoint on disk;
- *afresh*: a new job (``resume`` null, 12 steps) in the same work_dir, group 1 SIGKILLing itself after its 3rd step,
  before it saved a checkpoint of its own; group 0 finishes alone while group 1 restarts;
- *diloco*: streaming DiLoCo (2 fragments, period 4, fragment_sync_delay 1); group 1 SIGKILLs itself as it sends a
  sync after its 6th step;
- *diloco resumed*: streaming DiLoCo uninterrupted, and killed whole and restarted from its checkpoints (below).

The model has BatchNorm. Each group records every batch: the step, whether the groups committed it, the sample
indices it read, the groups alive and digests of the weights and of the buffers every group holds alike. The tests
assert on those records, never on timings.
"""
import collections
import json
import re

import pytest

from support import WORKERS
from support.processes import run_python

pytest.importorskip("torchft")

WORKER = WORKERS / "replica_group_worker.py"
SAMPLES, EPOCHS = 192, 8


def run_job(out, settings: dict, faults=()):
    settings = {"fault_tolerance": {"replica_groups": 2, "timeout": 30}, "step_seconds": 0.05,
                "step_seconds_alone": 0.3, **settings}
    result = run_python([WORKER, out, json.dumps(settings), json.dumps(list(faults))], timeout=240,
                        env={"RUST_LOG": "warn"})
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def records(out, tag=None) -> dict:
    """Each group's lines, in order (of the run ``tag`` only, when given)."""
    lines = {}
    for group in (0, 1):
        with open(out / f"group{group}.jsonl") as file:
            lines[group] = [line for line in map(json.loads, file) if tag is None or line["tag"] == tag]
    return lines


@pytest.fixture(scope="module")
def averaging(tmp_path_factory):
    out = tmp_path_factory.mktemp("averaging")
    faults = [{"group": 1, "attempt": 0, "at": "step", "step": 6},
              {"group": 1, "attempt": 1, "at": "allreduce", "step": 6}]
    first = run_job(out, {"num_epochs": EPOCHS, "tag": "first"}, faults)
    again = run_job(out, {"num_epochs": EPOCHS + 1, "resume": "auto", "tag": "again"})
    return out, first, again


@pytest.fixture(scope="module")
def afresh(averaging):
    """The *afresh* job, in the work_dir the averaging jobs left, with the time their group 1 last wrote last.pth."""
    out = averaging[0]
    earlier = (out / "work" / "replica_groups" / "1" / "model" / "last.pth").stat().st_mtime_ns
    result = run_job(out, {"num_epochs": None, "max_iters": 12, "tag": "afresh", "step_seconds_alone": 0},
                     [{"group": 1, "attempt": 0, "at": "step", "step": 3}])
    return out, result, earlier


@pytest.fixture(scope="module")
def diloco(tmp_path_factory):
    out = tmp_path_factory.mktemp("diloco")
    local_sgd = {"mode": "diloco", "period": 4, "fragments": 2, "fragment_sync_delay": 1}
    result = run_job(out, {"num_epochs": 4, "local_sgd": local_sgd, "tag": "diloco"},
                     [{"group": 1, "attempt": 0, "at": "sync", "step": 6}])
    return out, result


@pytest.fixture(scope="module")
def diloco_resumed(tmp_path_factory):
    """Streaming DiLoCo (period 6, 2 fragments: a sync every 3 steps, sent a step early) uninterrupted, and the same
    job killed whole at step 22 and restarted: each group resumes from its checkpoint of step 20, saved between a
    fragment's send and its outer step."""
    local_sgd = {"mode": "diloco", "period": 6, "fragments": 2, "fragment_sync_delay": 1}
    settings = {"num_epochs": 4, "local_sgd": local_sgd, "step_seconds": 0, "step_seconds_alone": 0}
    whole, killed = tmp_path_factory.mktemp("whole"), tmp_path_factory.mktemp("killed")
    run_job(whole, settings)
    run_job(killed, settings, [{"group": group, "attempt": 0, "at": "step", "step": 22} for group in (0, 1)])
    return records(whole), records(killed)


def test_a_group_killed_between_steps_and_in_the_all_reduce_is_restarted_twice_and_the_other_never(averaging):
    out, result, _ = averaging
    lines = records(out, "first")
    assert {line["attempt"] for line in lines[0]} == {0}
    assert [attempt for attempt, _ in collections.Counter(line["attempt"] for line in lines[1]).items()] == [0, 1, 2]
    assert "group 1" in result.stderr and "restart" in result.stderr


def test_the_survivor_goes_on_alone_and_drops_only_the_step_its_peer_died_in(averaging):
    out, _, _ = averaging
    survivor = records(out, "first")[0]
    steps = [line["step"] for line in survivor if line["committed"]]
    assert steps == list(range(1, len(steps) + 1))  # every committed step, once, in order
    assert len([line for line in survivor if not line["committed"]]) == 1  # the all-reduce its peer died in
    assert {line["alive"] for line in survivor} == {1, 2}
    dropped = next(index for index, line in enumerate(survivor) if not line["committed"])
    assert survivor[dropped + 1]["alive"] == 1  # the next step without the dead group


def test_a_restarted_group_rejoins_at_the_survivors_step_with_their_weights_from_memory(averaging):
    out, _, _ = averaging
    lines = records(out, "first")
    weights = {line["step"]: line["weights"] for line in lines[0] if line["committed"]}
    for attempt in (1, 2):
        rejoined = [line for line in lines[1] if line["attempt"] == attempt and line["committed"]]
        died_at = max(line["step"] for line in lines[1] if line["attempt"] == attempt - 1)
        assert rejoined[0]["step"] > died_at + 1  # the live group's position, not its own last checkpoint's
        assert [line["weights"] for line in rejoined] == [weights[line["step"]] for line in rejoined]


def test_at_every_committed_step_the_groups_weights_and_batchnorm_buffers_are_bitwise_equal(averaging):
    out, _, _ = averaging
    lines = records(out, "first")
    survivor = {line["step"]: (line["weights"], line["buffers"]) for line in lines[0] if line["committed"]}
    for attempt in (0, 1, 2):  # before the kills, and after each heal
        committed = [line for line in lines[1] if line["attempt"] == attempt and line["committed"]]
        assert committed and [(line["weights"], line["buffers"]) for line in committed] == [
            survivor[line["step"]] for line in committed]
    assert len({buffers for _, buffers in survivor.values()}) == len(survivor)  # the statistics moved every step


# The supervisor's own lines: the lighthouse, and a group that died, was restarted or finished.
SUPERVISOR_LINE = re.compile(r"^(\S+ \S+ (INFO|WARNING) )?(lighthouse of the replica groups|replica group \d )")


def test_the_console_shows_only_basetrainer_lines_each_group_s_tagged_and_the_libraries_words_go_to_the_group_log(
        averaging):
    out, result, _ = averaging
    untagged = [line for line in result.stderr.splitlines()
                if line.strip() and not line.startswith("[replica group ") and not SUPERVISOR_LINE.match(line)]
    assert untagged == []
    assert re.search(r"^\[replica group 0\] .* replica group 0: the groups did not commit step", result.stderr,
                     re.MULTILINE)  # what was dropped
    assert re.search(r"^\[replica group 1\] .* replica group 1: took the training state of replica group 0",
                     result.stderr, re.MULTILINE)  # who healed from whom
    survivor_log = (out / "work" / "replica_groups" / "0" / "log" / "train.log").read_text()
    assert "got exception waiting for work" in survivor_log  # torchft's, as group 1 died in the all-reduce
    assert "GET /checkpoint/" in survivor_log  # torchft's checkpoint server, sending the restarted group its state


def test_a_dropped_step_leaves_the_weights_and_buffers_as_the_step_before_it_left_them(averaging):
    out, _, _ = averaging
    survivor = records(out, "first")[0]
    dropped = next(index for index, line in enumerate(survivor) if not line["committed"])
    before, after = survivor[dropped - 1], survivor[dropped]
    assert (after["weights"], after["buffers"]) == (before["weights"], before["buffers"])


def test_no_sample_is_read_twice_in_an_epoch_and_none_is_left_but_a_remainder(averaging):
    out, _, _ = averaging
    read = collections.defaultdict(list)
    for group_lines in records(out, "first").values():
        for line in group_lines:
            if line["committed"]:
                read[line["epoch"]] += line["indices"]
    assert sorted(read) == list(range(EPOCHS))
    for indices in read.values():
        assert len(indices) == len(set(indices))
        assert SAMPLES - len(indices) < 2  # fewer than the processes alive at the epoch's end


def test_a_job_restarted_whole_resumes_every_group_from_its_own_checkpoint_on_disk(averaging):
    out, _, again = averaging
    first, resumed = records(out, "first"), records(out, "again")
    for group in (0, 1):
        assert resumed[group][0]["step"] == first[0][-1]["step"] + 1  # each from where the job ended
        assert {line["epoch"] for line in resumed[group]} == {EPOCHS}
    assert [(line["weights"], line["buffers"]) for line in resumed[0]] == [
        (line["weights"], line["buffers"]) for line in resumed[1]]
    for group in (0, 1):
        assert (out / "work" / "replica_groups" / str(group) / "model" / "last.pth").is_file()


def test_a_new_job_in_a_used_work_dir_never_resumes_the_earlier_job_s_checkpoints(afresh):
    out, result, earlier = afresh
    assert "is a finished run" not in result.stderr  # the earlier job's last.pth, of 9 epochs, was not resumed
    assert (out / "work" / "replica_groups" / "1" / "model" / "last.pth").stat().st_mtime_ns == earlier
    assert {line["attempt"] for line in records(out, "afresh")[1]} == {0}  # its restart trained nothing


def test_a_group_restarted_as_the_others_finish_exits_at_once_rather_than_waiting_for_a_peer(afresh):
    _, result, _ = afresh
    assert re.search(r"^\[replica group 1\] .* another group finished the training while this one restarted",
                     result.stderr, re.MULTILINE)
    assert "still runs" not in result.stderr  # the supervisor did not have to stop it after join_timeout_ms + 10 s
    assert "restart 1 of 3" in result.stderr  # restarted before group 0 finished; the job ended with 0


def test_diloco_groups_hold_the_same_outer_weights_at_every_step_through_a_death_during_a_sync(diloco):
    out, _ = diloco
    lines = records(out, "diloco")
    assert {line["attempt"] for line in lines[1]} == {0, 1}
    outer = {line["step"]: (line["weights"], line["buffers"]) for line in lines[0] if line["committed"]}
    both = [line for line in lines[1] if line["committed"]]
    assert both and all((line["weights"], line["buffers"]) == outer[line["step"]] for line in both)
    assert any(not line["committed"] for line in lines[0])  # the sync its peer died in, dropped
    assert len({weights for weights, _ in outer.values()}) > 2  # the outer steps changed the weights
    assert len({buffers for _, buffers in outer.values()}) > 2  # and the syncs the statistics


def test_diloco_resumed_from_disk_mid_sync_continues_bitwise_as_if_never_stopped(diloco_resumed):
    whole, killed = diloco_resumed
    for group in (0, 1):  # the outer weights and the last sync's buffers, and the group's own weights and buffers
        expected = {line["step"]: (line["weights"], line["buffers"], line["own"]) for line in whole[group]}
        resumed = [line for line in killed[group] if line["attempt"] == 1]
        assert resumed[0]["step"] == 21 and resumed[-1]["step"] == max(expected)
        assert [(line["weights"], line["buffers"], line["own"]) for line in resumed] == [
            expected[line["step"]] for line in resumed]
