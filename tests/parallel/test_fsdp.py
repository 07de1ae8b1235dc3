"""FSDP2, sharded (DCP) checkpoints, activation checkpointing and elastic resume.

The jobs (tests/support/workers/fsdp_worker.py, gloo on the CPU) run once per module in two
fixtures, several jobs to a launch (a job that kills its launch comes last); the tests read what
they wrote. A 2-process gloo job may abort at exit after its work is done, so the tests judge
the files, not only the exit code.
"""
import os
import pickle
import shutil

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.tensor import DTensor

from basetrainer.checkpoint import safe_dcp
from basetrainer.checkpoint import sharded as sharded_checkpoint
from basetrainer.checkpoint.discovery import is_sharded_checkpoint
from basetrainer.checkpoint.safe_dcp import read_metadata
from basetrainer.cli import main as cli_main
from basetrainer.data import TrainSampler
from basetrainer.engine.options import LoopOptions
from basetrainer.errors import CheckpointError, ConfigError
from basetrainer.parallel import FSDPStrategy, Strategy
from basetrainer.parallel.fsdp import choose_shard_classes
from basetrainer.scheduler import get_scheduler
from support import REPO, TESTS
from support.compare import same_weights
from support.hostile import Payload as _Payload
from support.processes import run_python
from support.workers.fsdp_worker import BlockMLP
from support.workers.tiny import NoisyBlobs

pytestmark = pytest.mark.slow

WORKER = os.path.join(TESTS, "support", "workers", "fsdp_worker.py")
ACCUMULATING = ["--accumulate", 2, "--clip", 0.5, "--async", "--every-n-iters", 1, "--activation-checkpointing", "Block"]
EMA = ["--ema", "--every-n-iters", 2]
ELASTIC = ["--every-n-iters", 2, "--epochs", 1, "--cosine"]  # FSDP from 1 process to 2
ELASTIC_DDP = ["--strategy", "ddp", "--async", *ELASTIC]  # from 2 processes to 1


def jobs(*runs, procs=2, last_killed=False):
    """Runs ``(work_dir, flags)`` jobs one after the other in one launch of the worker, each of which must end with
    its ``w.pt`` (but the last with ``last_killed``: a job that kills ends the launch); returns their folders."""
    argv = []
    for work_dir, flags in runs:
        argv += ["--then"] * bool(argv) + ["--work-dir", work_dir, "--out", work_dir / "w.pt", *flags]
    result = run_python([WORKER, "--procs", procs, *argv])
    for work_dir, _ in runs[:-1] if last_killed else runs:
        assert (work_dir / "w.pt").exists(), result.stderr[-4000:]
    return [work_dir for work_dir, _ in runs]


def result(folder, name="w.pt"):
    return torch.load(folder / name, weights_only=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``{name: folder}`` of the 2-process jobs that run to their end, in one launch (FSDP unless named ddp):
    ``batchnorm``, a BatchNorm in the model, a checkpoint every 2 steps, 2 epochs; ``accumulating``, 2 batches per
    step, clipping, activation checkpointing, async checkpoints every step; ``plain``, ``compiled`` and ``bf16``, 1
    epoch; ``ema`` and ``ema_ddp``, an EMA of the weights. Last, ``ema_killed``, the EMA job SIGKILLed after batch 3
    of epoch 1."""
    root = tmp_path_factory.mktemp("fsdp_runs")
    flags = {"batchnorm": ["--bn", "--every-n-iters", 2], "accumulating": ACCUMULATING, "plain": ["--epochs", 1],
             "compiled": ["--epochs", 1, "--compile"], "bf16": ["--epochs", 1, "--amp", "bf16"], "ema": EMA,
             "ema_ddp": [*EMA, "--strategy", "ddp"], "ema_killed": [*EMA, "--kill-at", "1:3"]}
    jobs(*((root / name, job_flags) for name, job_flags in flags.items()), last_killed=True)
    return {name: root / name for name in flags}


@pytest.fixture(scope="module")
def batchnorm_run(runs):
    return runs["batchnorm"]


@pytest.fixture(scope="module")
def accumulating_run(runs):
    return runs["accumulating"]


@pytest.fixture(scope="module")
def resumes(runs, tmp_path_factory):
    """``{name: folder}`` of the jobs that kill and resume, in four launches:

    - ``killed``: the accumulating job SIGKILLed inside its second save, copied to ``two`` and ``one``;
    - ``elastic``: DDP on 2 processes killed after batch 3 of its one epoch (cosine lr);
    - on 1 process: ``one`` resumed, ``elastic`` resumed, then ``grown``, FSDP killed after batch 3 on 1 process;
    - on 2 processes: ``two`` resumed, ``ema_killed`` (of ``runs``) resumed, ``grown`` resumed.
    """
    root = tmp_path_factory.mktemp("fsdp_resumes")
    folders = {name: root / name for name in ("killed", "two", "one", "elastic", "grown")}
    jobs((folders["killed"], [*ACCUMULATING, "--kill-in-save", 2]), last_killed=True)
    for copy in ("two", "one"):
        shutil.copytree(folders["killed"], folders[copy], symlinks=True)
    jobs((folders["elastic"], [*ELASTIC_DDP, "--kill-at", "0:3"]), last_killed=True)
    jobs((folders["one"], [*ACCUMULATING, "--resume", "auto"]),
         (folders["elastic"], [*ELASTIC_DDP, "--resume", "auto"]),
         (folders["grown"], [*ELASTIC, "--kill-at", "0:3"]), procs=1, last_killed=True)
    jobs((folders["two"], [*ACCUMULATING, "--resume", "auto"]), (runs["ema_killed"], [*EMA, "--resume", "auto"]),
         (folders["grown"], [*ELASTIC, "--resume", "auto"]))
    return folders


def one_process_reference(epochs, accumulate=1, clip=0.0, batchnorm=False):
    """What FSDP on 2 ranks x batch 8 must equal: one process stepping on the gradient averaged over
    both ranks' batches (each rank's batch through BatchNorm on its own; rank 0's statistics kept)."""
    dataset = NoisyBlobs(96, 0, augment=False)
    torch.manual_seed(7)  # the worker's seed: the trainer seeds before build_model
    model = BlockMLP(batchnorm)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    samplers = [TrainSampler(dataset, num_replicas=2, rank=r, seed=7) for r in range(2)]
    for epoch in range(epochs):
        for sampler in samplers:
            sampler.set_epoch(epoch)
        orders = [list(sampler) for sampler in samplers]
        for first in range(0, len(orders[0]) // 8, accumulate):
            loss = 0
            for b in range(first, first + accumulate):
                for rank, order in enumerate(orders):
                    kept = dict(model.bn.named_buffers())
                    if rank:  # rank 1's batch updates a copy of the statistics, dropped after
                        for name, buffer in kept.items():
                            setattr(model.bn, name, buffer.clone())
                    rows = order[b * 8:(b + 1) * 8]
                    loss = loss + nn.functional.cross_entropy(model(dataset.x[rows]), dataset.y[rows]) / (2 * accumulate)
                    for name, buffer in kept.items():
                        setattr(model.bn, name, buffer)
            optimizer.zero_grad()
            loss.backward()
            if clip:
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
    return model.state_dict()


def max_difference(a, b):
    assert a.keys() == b.keys()
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


# ---------------------------------------------------------------------- training
def test_fsdp_on_2_processes_equals_one_process_on_the_union_batch(batchnorm_run):
    assert max_difference(result(batchnorm_run)["weights"], one_process_reference(2, batchnorm=True)) < 1e-5


def test_fsdp_with_accumulation_clipping_and_activation_checkpointing_equals_one_process(accumulating_run):
    reference = one_process_reference(2, accumulate=2, clip=0.5)
    assert max_difference(result(accumulating_run)["weights"], reference) < 1e-5


def test_torch_compile_and_bf16_autocast_train_under_fsdp_as_without_them(runs):
    plain, compiled, bf16 = (result(runs[name])["weights"] for name in ("plain", "compiled", "bf16"))
    assert list(compiled) == list(bf16) == list(plain) == list(BlockMLP().state_dict())  # no _orig_mod. keys
    assert max_difference(compiled, plain) < 1e-5
    assert 0 < max_difference(bf16, plain) < 0.05  # bf16 forwards: close to fp32, not equal
    assert all(value.dtype == torch.float32 for value in bf16.values())  # the sharded parameters stay fp32


def test_ema_under_fsdp_averages_as_under_ddp_exports_whole_tensors_and_resumes_bitwise(runs, resumes):
    fsdp, ddp = result(runs["ema"]), result(runs["ema_ddp"])
    final = torch.load(runs["ema"] / "model" / "model_final.pth", weights_only=True)
    for weights in (fsdp["weights"], final.get("state_dict", final)):
        assert all(type(value) is torch.Tensor for value in weights.values())  # whole tensors, not rank 0's shards
        assert max_difference(weights, ddp["weights"]) < 1e-5
    assert fsdp["logs"]["test"]["loss"] == pytest.approx(ddp["logs"]["test"]["loss"], abs=1e-5)  # evaluated with the average
    assert same_weights(result(runs["ema_killed"])["weights"], fsdp["weights"])  # killed in epoch 1, resumed


def test_each_rank_holds_half_of_the_parameter_and_optimizer_bytes(batchnorm_run):
    full = sum(p.numel() * p.element_size() for p in BlockMLP(True).parameters())
    for rank in (0, 1):
        held = result(batchnorm_run, f"rank{rank}.pt")
        assert held["param_bytes"] == full // 2
        assert held["optimizer_bytes"] == full // 2  # SGD momentum: one buffer per parameter shard


def test_batchnorm_statistics_are_rank_0s_on_every_rank(batchnorm_run):
    ranks = [result(batchnorm_run, f"rank{r}.pt")["batchnorm"] for r in (0, 1)]
    assert all(torch.equal(a, b) for a, b in zip(*ranks))
    assert ranks[0][0].abs().sum() > 0  # the running mean moved: the statistics were trained


def test_evaluation_on_2_ranks_counts_101_samples_and_equals_one_process(batchnorm_run):
    run = result(batchnorm_run)
    assert run["test_num"] == 101  # 6 batches on one rank, 5 on the other: no deadlock, none counted twice
    model = BlockMLP(True)
    model.load_state_dict(run["weights"])
    test = NoisyBlobs(101, 1, augment=False)
    with torch.no_grad():
        loss = nn.functional.cross_entropy(model.eval()(test.x), test.y).item()
    assert run["logs"]["test"]["loss"] == pytest.approx(loss, rel=1e-5)


def test_the_final_weights_file_loads_into_the_plain_model_without_a_process_group(batchnorm_run):
    weights = torch.load(batchnorm_run / "model" / "model_final.pth", weights_only=True)
    BlockMLP(True).load_state_dict(weights)
    assert same_weights(weights, result(batchnorm_run)["weights"])


# ---------------------------------------------------------------------- checkpoints
def test_the_checkpoint_is_a_link_to_one_complete_dcp_directory(batchnorm_run):
    model_dir = batchnorm_run / "model"
    last = model_dir / "last"
    assert last.is_symlink() and (last / ".metadata").is_file()
    assert sorted(p.name for p in model_dir.glob(".last.*")) == [os.readlink(last)]  # older versions removed
    assert {f"__{r}_0.distcp" for r in (0, 1)} <= set(os.listdir(last))  # each rank wrote its own shards


def test_checkpoint_keys_carry_no_wrapper_prefixes(accumulating_run):
    keys = read_metadata(accumulating_run / "model" / "last").state_dict_metadata  # checkpoint_wrapper, FSDP
    model_keys = {k[len("model."):] for k in keys if k.startswith("model.")}
    assert model_keys == set(BlockMLP().state_dict())


def test_export_writes_one_consolidated_file_that_loads_with_weights_only(batchnorm_run, tmp_path, capsys):
    cli_main(["export", str(batchnorm_run / "model" / "last"), "--out", str(tmp_path / "w.pth")])
    weights = torch.load(tmp_path / "w.pth", weights_only=True)
    BlockMLP(True).load_state_dict(weights)
    assert same_weights(weights, result(batchnorm_run)["weights"])  # the last save is the final epoch's
    assert "wrote" in capsys.readouterr().out


def test_a_kill_during_a_save_keeps_the_previous_checkpoint(resumes):
    model_dir = resumes["killed"] / "model"
    assert not (resumes["killed"] / "w.pt").exists()
    assert is_sharded_checkpoint(model_dir / "last")
    loop = sharded_checkpoint.read_loop_state(model_dir / "last")
    assert (loop["epoch"], loop["batch"], loop["iteration"]) == (0, 2, 1)  # the first save, mid-epoch
    assert len(list(model_dir.glob(".last.*"))) == 2  # the second save, complete but never published


def test_a_same_size_resume_ends_bitwise_equal_to_the_uninterrupted_run(resumes, accumulating_run):
    resumed = resumes["two"]
    assert same_weights(result(resumed)["weights"], result(accumulating_run)["weights"])
    assert result(resumed)["logs"] == result(accumulating_run)["logs"]


def test_a_2_process_checkpoint_resumes_on_1_process_with_the_same_global_batch(resumes, accumulating_run):
    resumed = resumes["one"]
    assert result(resumed, "rank0.pt")["accumulate"] == 4  # 2 processes x 2 batches -> 1 process x 4
    assert max_difference(result(resumed)["weights"], result(accumulating_run)["weights"]) < 1e-5


def cosine_lrs(epoch_fractions):
    """The lr the workers' cosine schedule (lr 0.05 over 1 epoch) gives at each fraction of the epoch."""
    schedule = get_scheduler("cosine", torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.05), 0.05, 1, 1000)
    return [0.05 * schedule.lr_factor(1000 * f) for f in epoch_fractions]


def test_an_elastic_ddp_resume_from_2_to_1_process_sees_every_sample_of_the_epoch_once(resumes):
    folder = resumes["elastic"]
    before = [torch.load(folder / f"seen_before_kill{r}.pt")[0] for r in (0, 1)]
    after = result(folder, "rank0.pt")["seen"][0]
    assert len(before[0]) == len(before[1]) == 32 and len(after) == 32
    assert sorted(before[0] + before[1] + after) == list(range(96))
    # 6 batches per epoch on 2 processes, 12 (accumulating 2) on 1: the schedule follows the epoch
    assert torch.load(folder / "lrs_before_kill0.pt")[0] == pytest.approx(cosine_lrs([b / 6 for b in range(4)]))
    assert result(folder, "rank0.pt")["lrs"][0] == pytest.approx(cosine_lrs([b / 12 for b in range(8, 12)]))


def test_a_1_process_checkpoint_resumes_sharded_on_2_with_half_the_batch_each_and_every_sample_once(resumes):
    folder = resumes["grown"]  # strategy fsdp: sharded checkpoints at 1 process too
    before = torch.load(folder / "seen_before_kill0.pt")[0]
    after = [result(folder, f"rank{r}.pt")["seen"][0] for r in (0, 1)]
    assert len(before) == 32 and len(after[0]) == len(after[1]) == 32  # batch 8 at 1 process, 4 at 2
    assert sorted(before + after[0] + after[1]) == list(range(96))
    # the schedule was built for 6 batches of 8 per process; the resumed run splits the epoch into 12 of 4
    assert torch.load(folder / "lrs_before_kill0.pt")[0] == pytest.approx(cosine_lrs([b / 12 for b in range(4)]))
    for rank in (0, 1):
        assert result(folder, f"rank{rank}.pt")["lrs"][0] == pytest.approx(cosine_lrs([b / 12 for b in range(4, 12)]))


# ---------------------------------------------------------------------- in this process
def test_activation_checkpointing_gives_identical_gradients_and_plain_keys():
    torch.manual_seed(0)
    plain = BlockMLP(True)
    checkpointed = Strategy(torch.device("cpu"), activation_checkpointing=["Block"]).wrap(BlockMLP(True))
    checkpointed.load_state_dict(plain.state_dict())
    x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))
    for model in (plain, checkpointed):
        nn.functional.cross_entropy(model(x), y).backward()
    assert "CheckpointWrapper" in {type(m).__name__ for m in checkpointed.modules()}
    assert checkpointed.state_dict().keys() == plain.state_dict().keys()
    for (name, p), q in zip(plain.named_parameters(), checkpointed.parameters()):
        assert torch.equal(p.grad, q.grad), name


def test_fsdp_units_are_chosen_as_the_repeated_blocks_holding_most_parameters():
    import torchvision

    assert choose_shard_classes(BlockMLP()) == ("Block",)
    assert choose_shard_classes(torchvision.models.resnet18()) == ("BasicBlock",)
    assert choose_shard_classes(nn.Linear(4, 4)) == ()


def test_a_hostile_metadata_file_is_refused_and_never_run(tmp_path):
    dcp.save({"model.w": torch.zeros(2)}, checkpoint_id=tmp_path / "ckpt", no_dist=True)
    marker = tmp_path / "pwned"
    (tmp_path / "ckpt" / ".metadata").write_bytes(pickle.dumps(_Payload(str(marker))))
    with pytest.raises(CheckpointError, match=r"refusing to load .*ckpt: its \.metadata would call io\.open"):
        sharded_checkpoint.consolidated_weights(tmp_path / "ckpt")
    assert not marker.exists()


def test_a_hostile_value_in_a_checkpoint_is_refused_and_never_run(tmp_path):
    marker = tmp_path / "pwned"
    dcp.save({"lr": _Payload(str(marker))}, checkpoint_id=tmp_path / "ckpt", no_dist=True)
    with pytest.raises(CheckpointError, match="refusing to load lr .*arbitrary code.*io.open"):
        safe_dcp.load({"lr": 0.1}, tmp_path / "ckpt", no_dist=True)
    assert not marker.exists()


@pytest.fixture
def one_process_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_an_optimizer_built_before_sharding_is_refused(one_process_group):
    strategy, model = FSDPStrategy(torch.device("cpu")), BlockMLP()
    built_too_early = torch.optim.SGD(model.parameters(), lr=0.1)
    sharded = strategy.wrap(model)
    with pytest.raises(ConfigError, match="not the sharded model's, so it would train nothing"):
        strategy.check_optimizer(sharded, built_too_early)


def test_a_forward_before_the_optimizer_is_built_is_undone_before_building_it(one_process_group):
    strategy = FSDPStrategy(torch.device("cpu"))
    model = strategy.wrap(BlockMLP())
    with torch.no_grad():
        model(torch.randn(2, 8))  # a model summary: the root's parameters stay gathered
    with pytest.raises(ConfigError):
        strategy.check_optimizer(model, torch.optim.SGD(model.parameters(), lr=0.1))
    strategy.prepare_for_optimizer(model)  # what build() does before build_optimizer
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    strategy.check_optimizer(model, optimizer)
    assert all(isinstance(p, DTensor) for group in optimizer.param_groups for p in group["params"])


def test_sync_bn_under_fsdp_on_the_cpu_is_a_one_line_config_error():
    with pytest.raises(ConfigError, match="sync_bn needs CUDA .* set sync_bn: false"):
        FSDPStrategy(torch.device("cpu"), sync_bn=True)


def test_an_unknown_strategy_or_shard_class_is_a_config_error():
    with pytest.raises(ConfigError, match="config key 'strategy' expects ddp or fsdp, got str 'zero'"):
        LoopOptions.from_config({"strategy": "zero"}, torch.device("cpu"))
    with pytest.raises(ConfigError, match="activation_checkpointing: Blok is no module class of this model"):
        Strategy(torch.device("cpu"), activation_checkpointing=["Blok"]).wrap(BlockMLP())


def test_a_rank_without_an_evaluation_batch_is_a_one_line_error_on_every_rank_not_a_hang(tmp_path):
    run = run_python([WORKER, "--procs", 2, "--work-dir", tmp_path, "--out", tmp_path / "w.pt", "--epochs", 1,
                      "--test-size", 1], timeout=120)
    assert run.returncode != 0 and not (tmp_path / "w.pt").exists()
    assert "strategy fsdp: a process has no evaluation batch (the busiest has 1)" in run.stderr, run.stderr[-4000:]
    assert "at least one sample per process (2)" in run.stderr


def test_the_example_trains_resnet18_with_fsdp_on_2_processes_on_the_digits(tmp_path):
    example = os.path.join(REPO, "examples", "example.py")
    run = run_python([example, "--distributed", "--gpu_id", 0, 1, "--strategy", "fsdp", "--no-progress",
                      "max_iters=4", "input_size=[16,16]"], cwd=tmp_path)  # 4 steps: what FSDP does, not accuracy
    model_dir = tmp_path / "work_dirs" / "classification" / "model"
    assert is_sharded_checkpoint(model_dir / "last"), run.stderr[-4000:]
    assert "8 unit(s) of BasicBlock (chosen automatically" in run.stderr
    assert (model_dir / "model_final.pth").is_file()
