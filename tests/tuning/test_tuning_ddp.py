"""The tuning tools under DDP (2 gloo processes, one launch): every rank sweeps the same rates, reads the same
losses, stops at the same step and gets the same suggestion and batch size; the runs after them are unchanged."""
import pytest
import torch

from support import WORKERS
from support.processes import run_python

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("tuning_ddp")
    result = run_python([WORKERS / "tuning_worker.py", out, "--procs", 2])
    assert result.returncode == 0, result.stderr[-3000:]
    return [torch.load(out / f"rank{rank}.pt") for rank in (0, 1)]


def test_every_rank_sweeps_the_same_rates_and_reads_the_same_averaged_losses(ranks):
    assert ranks[0]["lrs"] == ranks[1]["lrs"] and len(ranks[0]["lrs"]) > 2
    assert ranks[0]["losses"] == ranks[1]["losses"]


def test_every_rank_stops_at_the_same_step_with_the_same_suggestion(ranks):
    assert ranks[0]["suggestion"] is not None
    assert (ranks[0]["stopped"], ranks[0]["suggestion"]) == (ranks[1]["stopped"], ranks[1]["suggestion"])


def test_every_rank_tries_the_same_batch_sizes_and_finds_the_same(ranks):
    assert (ranks[0]["sizes"], ranks[0]["largest"]) == (ranks[1]["sizes"], ranks[1]["largest"])


def test_a_ddp_run_after_the_tools_is_bitwise_the_run_without_them(ranks):
    assert ranks[0]["same_run"] and ranks[1]["same_run"]
