"""examples/language_model.py, the engine's first task that is not image classification: a GPT-style
model on the bytes of Python's own sources learns (its test loss falls well below a uniform guess's
ln 256), logs tokens per second and perplexity, and trains the same way in two processes under DDP
and FSDP, in four on a 2 x 2 mesh (tensor parallel x FSDP), and in two as a 2-stage pipeline, where it
learns what one process learns."""
import csv
import math
import re

import pytest

from support import EXAMPLES
from support.processes import run_python

SMALL = ["seq_len=64", "batch_size=16", "dim=64", "heads=4", "layers=2", "lr=3e-3", "log_freq=10"]


def train(folder, *arguments, steps=60):
    result = run_python([str(EXAMPLES / "language_model.py"), f"max_iters={steps}", f"eval_every_n_iters={steps // 2}",
                         "work_dir=work", *SMALL, *arguments], cwd=folder, timeout=300,
                        env={"CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr + result.stdout


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """One process's 60 steps, evaluated at 30 and 60 (a steady state at 20 is too short to be measured):
    ``(its folder, its output)``; the pipeline's reference too."""
    folder = tmp_path_factory.mktemp("single")
    return folder, train(folder)


def test_the_language_model_learns_and_logs_tokens_per_second_and_perplexity(single):
    folder, log = single
    evaluations = re.findall(r"step (\d+): tokens/s \(all processes\) (\d+) in steady state, (\d+) over the whole "
                             r"run; test loss ([\d.]+), perplexity ([\d.]+)", log)
    assert [int(step) for step, *_ in evaluations] == [30, 60]
    losses = [float(loss) for *_, loss, _ in evaluations]
    assert losses[1] < losses[0] < math.log(256)  # below a uniform guess over the 256 bytes, and falling
    # the steady state leaves out the first batches and the evaluations, which the whole run's rate counts
    assert all(int(steady) > int(whole_run) > 0 for _, steady, whole_run, _, _ in evaluations)
    assert math.isclose(float(evaluations[-1][4]), math.exp(losses[-1]), rel_tol=1e-3)
    with open(folder / "work" / "log" / "history.csv") as history:
        assert float(list(csv.DictReader(history))[-1]["test_loss"]) == pytest.approx(losses[-1], abs=1e-4)
    assert (folder / "work" / "model" / "last.pth").is_file()


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_the_language_model_trains_in_two_processes(strategy, tmp_path):
    log = train(tmp_path, "--distributed", "--gpu_id", "0", "1", f"strategy={strategy}", steps=40)
    losses = [float(loss) for loss in re.findall(r"test loss ([\d.]+), perplexity", log)]
    assert len(losses) == 2 and losses[1] < losses[0] < math.log(256)
    if strategy == "fsdp":
        assert "fsdp: 2 unit(s) of Block" in log


def test_the_language_model_trains_on_a_2x2_mesh_of_tensor_parallel_and_fsdp(tmp_path):
    log = train(tmp_path, "--distributed", "--gpu_id", "0", "1", "2", "3", "parallel.mesh.tp=2",
                "parallel.mesh.dp_shard=2", steps=40)
    assert "tensor parallel: 12 module(s) split over tp 2" in log  # query, key, value, out and the MLP's two, x2
    assert "mesh: dp_replicate 1 x dp_shard 2 x tp 2 (4 processes)" in log
    losses = [float(loss) for loss in re.findall(r"test loss ([\d.]+), perplexity", log)]
    assert len(losses) == 2 and losses[1] < losses[0] < math.log(256)


def test_the_language_model_trains_as_a_two_stage_pipeline_as_in_one_process(tmp_path, single):
    log = train(tmp_path, "--distributed", "--gpu_id", "0", "1", "parallel.mesh.pp=2")
    assert "pipeline: 2 stages (1 per process), schedule 1F1B, 2 microbatches; stage 0: tokens .. blocks.0; " \
           "stage 1: blocks.1 .. head" in log
    losses, expected = ([float(loss) for loss in re.findall(r"test loss ([\d.]+), perplexity", text)]
                        for text in (log, single[1]))
    assert len(losses) == 2 and losses[1] < losses[0] < math.log(256)
    assert losses == pytest.approx(expected, abs=2e-3)  # the same batches, split into 2 microbatches over 2 stages
