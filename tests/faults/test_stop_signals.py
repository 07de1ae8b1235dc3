"""Faults in every phase of a real job (tests/workers/tiny.py as a subprocess): a stop signal during
start-up, evaluation or a save stops within that phase, saves and exits 75, and the resumed run
ends bitwise equal to one never stopped; SIGUSR1 under SLURM requeues the job; a rank that
hangs ends the job through its watchdog; torchrun restarts a job whose worker died and it ends as
one that never failed.
"""
import hashlib
import os
import textwrap
import time

import pytest

from basetrainer.checkpoint import load_checkpoint
from support.compare import load_result, same_weights
from support.processes import TINY, free_port, run_python

pytestmark = pytest.mark.slow


def flags(work, procs=1, *extra):
    return ["--procs", procs, "--work-dir", work, "--out", work / "w.pt", "--every-n-iters", 2, *extra]


def assert_same_run(result_file, reference_file):
    resumed, reference = load_result(result_file), load_result(reference_file)
    assert same_weights(resumed["weights"], reference["weights"])
    assert resumed["logs"] == reference["logs"]


@pytest.fixture(scope="module")
def evaluating_every_4_steps(tmp_path_factory):
    """A reference run of 1 process that evaluates every 4 steps (before on_batch_end)."""
    root = tmp_path_factory.mktemp("every4")
    result = run_python([TINY, *flags(root, 1, "--eval-every", 4)])
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "w.pt"


@pytest.mark.parametrize("procs", [1, 2])
def test_a_stop_signal_during_the_epoch_end_evaluation_abandons_it_and_the_resumed_run_does_it_again(
        tiny, tmp_path, uninterrupted, procs):
    # rank 0's 2nd test batch; on 2 processes the ranks compare flags every 2 test batches
    stopped = tiny(*flags(tmp_path, procs, "--signal-in", "evaluation:2:SIGTERM", "--stop-check-every", 2),
                   check=False)
    assert stopped.returncode == 75
    assert "stopped by SIGTERM during evaluation at epoch 1" in stopped.stderr
    saved = load_checkpoint(str(tmp_path / "model" / "last.pth"))
    assert saved["evaluation_pending"] == "end" and saved["last_eval_step"] == -1  # no half-published results
    tiny(*flags(tmp_path, procs, "--resume", "auto"))
    assert_same_run(tmp_path / "w.pt", uninterrupted / f"p{procs}.pt")


def test_a_stop_signal_during_an_evaluation_before_on_batch_end_resumes_with_it_then_on_batch_end(
        tiny, tmp_path, evaluating_every_4_steps):
    stopped = tiny(*flags(tmp_path, 1, "--eval-every", 4, "--signal-in", "evaluation:14:SIGUSR1"), check=False)
    assert stopped.returncode == 75 and "during evaluation at epoch 1, batch 8" in stopped.stderr
    assert load_checkpoint(str(tmp_path / "model" / "last.pth"))["evaluation_pending"] == "batch"
    tiny(*flags(tmp_path, 1, "--eval-every", 4, "--resume", "auto"))
    assert_same_run(tmp_path / "w.pt", evaluating_every_4_steps)


def test_a_stop_signal_during_a_save_lets_it_finish_then_stops(tiny, tmp_path, uninterrupted):
    stopped = tiny(*flags(tmp_path, 1, "--signal-in", "save:3:SIGTERM"), check=False)  # the save at step 6
    assert stopped.returncode == 75
    assert "stopped by SIGTERM at epoch 1, batch 6" in stopped.stderr and "holds this state already" in stopped.stderr
    assert load_checkpoint(str(tmp_path / "model" / "last.pth"))["iteration"] == 6  # complete, checksum and all
    tiny(*flags(tmp_path, 1, "--resume", "auto"))
    assert_same_run(tmp_path / "w.pt", uninterrupted / "p1.pt")


def test_a_stop_signal_while_the_checkpoint_loads_stops_at_the_end_of_start_up_saving_nothing(
        tiny, tmp_path, uninterrupted):
    tiny(*flags(tmp_path, 1, "--kill-at", "1:3"), check=False)
    last = tmp_path / "model" / "last.pth"
    before = hashlib.sha256(last.read_bytes()).hexdigest()
    stopped = tiny(*flags(tmp_path, 1, "--resume", "auto", "--signal-in", "start-up:2:SIGTERM"), check=False)
    assert stopped.returncode == 75
    assert "stopped by SIGTERM during start-up (nothing trained yet, nothing to save)" in stopped.stderr
    assert hashlib.sha256(last.read_bytes()).hexdigest() == before
    tiny(*flags(tmp_path, 1, "--resume", "auto"))
    assert_same_run(tmp_path / "w.pt", uninterrupted / "p1.pt")


FAKE_SCONTROL = textwrap.dedent('''\
    #!/bin/sh
    echo "$@" >> "$SCONTROL_LOG"
''')


def test_sigusr1_under_slurm_requeues_the_job_after_saving_and_the_requeued_job_resumes_by_itself(
        tiny, tmp_path, uninterrupted):
    bin_dir, log = tmp_path / "bin", tmp_path / "scontrol.log"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(FAKE_SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    slurm = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SCONTROL_LOG": str(log), "SLURM_JOB_ID": "4242"}
    work = tmp_path / "work"
    stopped = tiny(*flags(work, 1, "--signal-in", "training:5:SIGUSR1"), check=False, env=slurm)
    assert stopped.returncode == 75
    assert "requeued SLURM job 4242: it resumes with resume: auto" in stopped.stderr
    assert log.read_text() == "requeue 4242\n"
    assert load_checkpoint(str(work / "model" / "last.pth"))["iteration"] == 5
    # no resume key, but SLURM restarted the job; a run from scratch would be killed at its 3rd batch
    tiny(*flags(work, 1, "--kill-at", "0:2"), env=dict(slurm, SLURM_RESTART_COUNT="1"))
    assert_same_run(work / "w.pt", uninterrupted / "p1.pt")


def test_slurm_requeue_false_only_saves_and_stops(tiny, tmp_path):
    bin_dir, log = tmp_path / "bin", tmp_path / "scontrol.log"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(FAKE_SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    slurm = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SCONTROL_LOG": str(log), "SLURM_JOB_ID": "4242"}
    stopped = tiny(*flags(tmp_path / "work", 1, "--signal-in", "training:5:SIGUSR1", "--no-requeue"), check=False,
                   env=slurm)
    assert stopped.returncode == 75 and "rerun with resume: auto" in stopped.stderr
    assert not log.exists()


def test_a_rank_that_hangs_ends_the_job_through_its_watchdog_naming_it_with_every_stack(tiny, tmp_path):
    started = time.monotonic()
    result = tiny("--procs", 2, "--work-dir", tmp_path, "--hang-on-rank", "1:6", "--watchdog", 3, "--epochs", 50,
                  "--timeout", 300, check=False, timeout=120)
    assert result.returncode == 124
    assert time.monotonic() - started < 60  # a few seconds after the hang, not dist_timeout (300 s here)
    assert "rank(s) [1] stalled" in result.stderr  # rank 0 names the rank it waits for
    assert "watchdog: no training step finished for 3s" in result.stderr.strip().splitlines()[-1]
    assert "in on_batch_end" in result.stderr and "in _watch" in result.stderr  # every thread's stack, on each rank


@pytest.mark.parametrize("procs, at", [(1, "1:5:SIGTERM"), (2, "1:2:SIGUSR1")])
def test_a_stop_signal_saves_last_pth_exits_75_and_resume_continues_exactly(tiny, tmp_path, uninterrupted, procs, at):
    flags = ["--procs", procs, "--work-dir", tmp_path, "--out", tmp_path / "w.pt", "--every-n-iters", 2]
    stopped = tiny(*flags, "--signal-at", at, check=False)
    assert stopped.returncode == 75
    assert "stopped by SIG" in stopped.stderr and "rerun with resume: auto" in stopped.stderr
    tiny(*flags, "--resume", "auto")
    resumed, reference = load_result(tmp_path / "w.pt"), load_result(uninterrupted / f"p{procs}.pt")
    assert same_weights(resumed["weights"], reference["weights"]) and resumed["logs"] == reference["logs"]


def test_torchrun_restarts_after_a_worker_dies_resume_and_end_like_a_run_that_never_failed(tmp_path, uninterrupted):
    result = run_python(["-m", "torch.distributed.run", "--nproc_per_node", "2", "--max-restarts", "1",
                         "--master_port", free_port(), TINY, "--work-dir", tmp_path, "--out", tmp_path / "w.pt",
                         "--every-n-iters", 2, "--resume", "auto", "--die-once-at", "1:3"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "died_once").exists()  # a worker really died and the group was restarted
    assert same_weights(load_result(tmp_path / "w.pt")["weights"], load_result(uninterrupted / "p2.pt")["weights"])
