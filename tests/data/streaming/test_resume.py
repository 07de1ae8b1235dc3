"""Training on shards survives a SIGKILL mid-epoch with 2 loader workers, bitwise, and an elastic resume on another
number of processes trains on every remaining sample of the epoch once: the jobs of tests/support/workers/tiny.py
(a model with BatchNorm, dropout, momentum, a cosine schedule) on 96 samples in shards, one epoch of batches of 8,
checkpointing every 2 steps. The jobs run once, in a module fixture, and the tests read what they left."""
import json
import re
import shutil

import pytest

from basetrainer.checkpoint import load_checkpoint
from support.compare import load_result, same_weights
from support.processes import TINY, run_python
from support.shards import S3Server, numbered_shards

pytestmark = pytest.mark.slow

SAMPLES, BATCH = 96, 8


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every job once: an uninterrupted one; one SIGKILLed after its 5th batch and resumed on 1 process, and
    (a copy of its checkpoint) on 2; one of 2 processes SIGKILLed after their 3rd batch and resumed on 1; one
    reading the shards from moto's S3 server, which stops for good after its 4th batch, resumed once the server
    is back. Each job records what it trained under ``<run>/<phase>``; ``<run>/resume_at`` is the batch its
    checkpoint resumes."""
    root = tmp_path_factory.mktemp("streaming_resume")
    shards = numbered_shards(root / "shards", n=SAMPLES, shard_bytes=1200)

    def job(name, phase, *flags, workers=2, env=None, fails=False):
        (root / name / phase).mkdir(parents=True)
        result = run_python([TINY, "--epochs", 1, "--batch-size", BATCH, "--shards", shards, "--workers", workers,
                             "--every-n-iters", 2, "--work-dir", root / name, "--out", root / f"{name}.pt",
                             "--record", root / name / phase, *flags], env=env)
        killed = "--kill-at" in flags or fails
        assert (result.returncode != 0) == killed, result.stderr[-3000:]
        if killed:
            checkpoint = load_checkpoint(str(root / name / "model" / "last.pth"))
            (root / name / "resume_at").write_text(str(checkpoint["batch"]))
        return result

    job("reference", "whole")
    job("killed", "before", "--kill-at", "0:4")  # SIGKILLed after its 5th batch, before that batch's checkpoint
    shutil.copytree(root / "killed", root / "grown")  # the same checkpoint, resumed on 2 processes
    job("killed", "after", "--resume", "auto")
    job("grown", "after", "--resume", "auto", "--procs", 2, workers=0)  # the elastic runs read in-process
    job("shrunk", "before", "--procs", 2, "--kill-at", "0:2", workers=0)
    job("shrunk", "after", "--resume", "auto", workers=0)
    server = S3Server().start()  # the same shards from a server that goes away after the 4th batch, for good
    try:
        url = server.upload(shards, "shards", "numbered")
        remote = ["--shards", url, "--shard-cache", root / "cache", "--retry-seconds", 2]
        (root / "remote").mkdir()
        (root / "remote" / "stopped.txt").write_text(
            job("remote", "before", *remote, "--stop-process-at", f"0:3:{server.process.pid}", workers=0,
                env=server.env, fails=True).stderr)
        server.start()  # back, with the same objects
        server.upload(shards, "shards", "numbered")
        job("remote", "after", *remote, "--resume", "auto", workers=0, env=server.env)
    finally:
        server.stop()
    return root


def trained(folder) -> dict:
    """``{(rank, batch): sample indices}`` of what a job trained, from the record it left in ``folder``."""
    batches = {}
    for path in sorted(folder.glob("rank*.jsonl")):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            batches[(path.stem, entry["batch"])] = entry["indices"]
    return batches


def checkpointed(run) -> list:
    """The samples a killed job trained in the steps its checkpoint holds (not the batch after it)."""
    resume_at = int((run / "resume_at").read_text())
    return [i for (_, batch), indices in trained(run / "before").items() if batch < resume_at for i in indices]


def test_a_run_killed_mid_epoch_with_loader_workers_resumes_to_bitwise_the_same_weights(runs):
    resumed, reference = load_result(runs / "killed.pt"), load_result(runs / "reference.pt")
    assert same_weights(resumed["weights"], reference["weights"])


def test_the_resumed_run_trains_the_rest_of_the_epoch_in_the_uninterrupted_runs_batches_and_order(runs):
    reference, resumed = trained(runs / "reference" / "whole"), trained(runs / "killed" / "after")
    resume_at = int((runs / "killed" / "resume_at").read_text())
    assert resumed == {key: indices for key, indices in reference.items() if key[1] >= resume_at}


def test_every_sample_is_trained_once_in_an_epoch_over_the_loader_workers(runs):
    assert sorted(i for indices in trained(runs / "reference" / "whole").values() for i in indices) == \
        list(range(SAMPLES))


@pytest.mark.parametrize("run", ["grown", "shrunk"])
def test_an_elastic_resume_trains_every_remaining_sample_of_the_epoch_once(runs, run):
    before = checkpointed(runs / ("killed" if run == "grown" else run))
    after = [i for indices in trained(runs / run / "after").values() for i in indices]
    assert sorted(before + after) == list(range(SAMPLES))
    assert {rank for rank, _ in trained(runs / run / "after")} == ({"rank0", "rank1"} if run == "grown" else {"rank0"})


def test_a_server_that_stays_down_stops_the_run_with_one_line_naming_the_shards_url(runs):
    errors = [line for line in (runs / "remote" / "stopped.txt").read_text().splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert re.search(r"cannot download s3://shards/numbered/chunk-0-\d+\.bin after \d+ tries in 2 s", errors[0])


def test_the_run_stopped_by_the_server_resumes_with_nothing_lost_or_repeated(runs):
    assert same_weights(load_result(runs / "remote.pt")["weights"], load_result(runs / "reference.pt")["weights"])
    assert sorted(checkpointed(runs / "remote") + [i for indices in trained(runs / "remote" / "after").values()
                                                   for i in indices]) == list(range(SAMPLES))
