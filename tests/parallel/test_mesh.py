"""Hybrid parallelism on a device mesh (basetrainer.parallel.mesh, .pipeline, .tensor_parallel, .hybrid).

The slow tests share one launch of 4 gloo processes that trains the same model on several
layouts in turn, pipelines among them (tests/support/workers/mesh_worker.py): each layout's
trained weights must equal a hand-written one-process loop on the union of the data-parallel
processes' batches (SGD, accumulation 2, clipping on), a run resumed at the same layout must
end bitwise where an uninterrupted one does, and one resumed at another layout where the first
layout's reference does. Three more launches: one stopped by SIGTERM, one that must fail, and
one process resuming. The fast tests check the config and the plans in one process (the
pipeline's own in tests/parallel/test_pipeline.py).
"""
import os

import pytest
import torch
from torch import nn

from basetrainer.cli import main as cli_main
from basetrainer.config.kinds import Invalid, MappingOf, Text
from basetrainer.engine.options import LoopOptions
from basetrainer.errors import ConfigError
from basetrainer.parallel.hybrid import clip_grad_norm_by_mesh
from basetrainer.parallel.mesh import MeshShape, build_mesh, data_parallel_coordinates
from basetrainer.parallel.tensor_parallel import resolve_plan
from support import TESTS
from support.compare import same_weights
from support.processes import run_python
from support.toy import ToyTrainer, toy_cfg
from support.workers.fsdp_worker import Indexed
from support.workers.mesh_worker import TensorParallelMLP

WORKER = os.path.join(TESTS, "support", "workers", "mesh_worker.py")
JOBS = {  # name: (layout, the data-parallel size of the one-process reference it must equal)
    "tp4": ("1,1,4", 1),
    "fsdp_tp": ("1,2,2", 2),
    "hsdp_tp": ("2,1,2", 2),
    "hsdp": ("2,2,1", 4),
    "tp4_ema": ("1,1,4+ema", 1),
    "fsdp_tp_ema": ("1,2,2+ema", 2),
    "half": ("1,2,2@3", None),
    "resumed": ("1,2,2<half", 2),
    "resharded": ("2,1,2<half", 2),
    "on_fewer": ("1,1,4<half", 2),  # data-parallel 2 -> 1: accumulation 4 keeps the global batch
    # pipelines ("P:R,S,T~SCHEDULE/MICROBATCHES"): pp P; the four blocks and the stem and head split into stages
    "pp4_1f1b": ("4:1,1,1~1F1B/4", 1),
    "pp_fsdp": ("2:1,2,1~1F1B/2", 2),
    "pp_ddp": ("2:2,1,1~GPipe/2", 2),  # whole copies of each stage, gradients all-reduced
    "pp_tp_interleaved": ("2:1,1,2~Interleaved1F1B/2", 1),  # 4 stages, 2 per process, each split over tp 2
    "pp_zero_bubble": ("2:1,2,1~InterleavedZeroBubble/4", 2),
    "pp_ema": ("2:1,2,1~1F1B/2+ema", 2),
    "pp_half": ("2:1,2,1~1F1B/2@3", None),
    "pp_resumed": ("2:1,2,1~1F1B/2<pp_half", 2),
    "pp_to_mesh": ("1,2,2<pp_half", 2),  # a pipeline's checkpoint resumed without one
    "mesh_to_pp": ("2:1,2,1~GPipe/2<half", 2),  # and the other way
    "after_stop": ("2:1,1,2~Interleaved1F1B/2<stopped", 1),  # the job stopped by SIGTERM (below), resumed
    "pp_run_step": ("2:1,2,1~1F1B/2+run_step", None),
    "mesh_lr": ("1,2,2+lr", 2),  # an LR schedule (halved after step 3), deterministic and the watchdog on
    "pp_lr": ("2:1,2,1~1F1B/2+lr", 2),  # refused: the error is written, the launch goes on
}  # and "single", "pp_single": "half", "pp_half" resumed in one process, no process group
PIPELINES = [name for name, (layout, _) in JOBS.items() if name.startswith("pp")
             and not any(mark in layout for mark in "<@+")]


@pytest.fixture(scope="module")
def meshes(tmp_path_factory):
    out = tmp_path_factory.mktemp("meshes")
    for name, layout, procs in (("stopped", "2:1,1,2~Interleaved1F1B/2!2", 4),  # SIGTERM after step 2
                                ("plain", "2:1,1,1~GPipe/2+plain", 2)):  # fails: its forward calls every module
        ended = run_python([WORKER, "--out", out, "--procs", procs, f"{name}={layout}"], timeout=300)
        (out / f"{name}.log").write_text(f"{ended.returncode}\n{ended.stderr}")
    result = run_python([WORKER, "--out", out, *(f"{name}={layout}" for name, (layout, _) in JOBS.items())],
                        timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    result = run_python([WORKER, "--out", out, "--procs", 1, "single=1,1,1<half", "pp_single=1,1,1<pp_half"],
                        timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return out


def trained(meshes, name):
    return torch.load(meshes / f"{name}.pt", weights_only=False)


def assert_close_weights(weights, expected):
    """Every weight of ``expected`` in ``weights``, equal within 1e-6 (what the order of floating-point sums leaves)."""
    for key, value in expected.items():
        torch.testing.assert_close(weights[key], value, rtol=0, atol=1e-6, msg=key)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tp4", "fsdp_tp", "hsdp_tp", "hsdp"])
def test_every_layout_trains_the_weights_one_process_trains_on_the_union_batch(meshes, name):
    run, data_parallel = trained(meshes, name), JOBS[name][1]
    reference = torch.load(meshes / f"reference{data_parallel}.pt")
    assert run["strategy"] == "mesh"
    assert sorted(run["weights"]) == sorted(reference)  # whole weights, the model's own names
    assert_close_weights(run["weights"], reference)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tp4", "fsdp_tp", "hsdp_tp", "hsdp"])
def test_evaluation_and_predict_count_every_test_sample_once_whatever_the_layout(meshes, name):
    run = trained(meshes, name)
    model = TensorParallelMLP()
    model.load_state_dict(run["weights"])
    x, y = (torch.stack(column) for column in list(zip(*Indexed(37, 1)))[:2])  # the worker's test set
    with torch.no_grad():
        outputs = model(x)
    torch.testing.assert_close(run["predicted"], outputs, rtol=0, atol=1e-5)  # 37 rows, in dataset order
    assert run["logs"]["test"]["loss"] == pytest.approx(nn.functional.cross_entropy(outputs, y).item(), abs=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tp4", "fsdp_tp", "hsdp"])
def test_processes_of_one_tensor_parallel_group_see_the_same_batches_and_data_parallel_ones_differ(meshes, name):
    seen = trained(meshes, name)["seen"]  # (data-parallel rank, batches) of ranks 0..3
    layout = [int(size) for size in JOBS[name][0].split(",")]
    tp = layout[2]
    for rank, (data_rank, batches) in enumerate(seen):
        assert data_rank == rank // tp
        assert batches == seen[data_rank * tp][1]
    shards = {data_rank: batches for data_rank, batches in seen}
    assert len(shards) == layout[0] * layout[1]
    for step in zip(*shards.values()):  # the data-parallel ranks' batch of each step: disjoint
        assert len({i for batch in step for i in batch}) == sum(len(batch) for batch in step)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tp4_ema", "fsdp_tp_ema"])
def test_an_ema_of_tensor_parallel_and_sharded_weights_equals_the_one_process_ema(meshes, name):
    run, data_parallel = trained(meshes, name), JOBS[name][1]
    reference = torch.load(meshes / f"reference_ema{data_parallel}.pt")
    assert not same_weights(reference, torch.load(meshes / f"reference{data_parallel}.pt"))  # an average, not the last
    assert_close_weights(run["weights"], reference)


@pytest.mark.slow
def test_a_resume_at_the_same_layout_ends_bitwise_where_the_uninterrupted_run_does(meshes):
    assert same_weights(trained(meshes, "resumed")["weights"], trained(meshes, "fsdp_tp")["weights"])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resharded", "on_fewer", "single"])
def test_a_checkpoint_of_a_2x2_mesh_resumes_on_another_layout_and_continues_the_same_training(meshes, name):
    resharded, uninterrupted = trained(meshes, name)["weights"], trained(meshes, "fsdp_tp")["weights"]
    assert_close_weights(resharded, uninterrupted)




@pytest.mark.slow
def test_export_writes_whole_weights_from_a_2x2_mesh_checkpoint(meshes, tmp_path):
    cli_main(["export", str(meshes / "fsdp_tp" / "model" / "last"), "--out", str(tmp_path / "w.pth")])
    weights = torch.load(tmp_path / "w.pth", weights_only=True)
    TensorParallelMLP().load_state_dict(weights)
    assert same_weights(weights, trained(meshes, "fsdp_tp")["weights"])


# ---------------------------------------------------------------- one process: config, shapes, plans
def test_a_mesh_must_hold_every_process_and_one_size_may_be_inferred():
    assert MeshShape.from_sizes({"tp": 2, "dp_shard": -1}, 8) == MeshShape(1, 4, 2)
    assert MeshShape.from_sizes({"dp_replicate": 2, "dp_shard": 2}, 4).data_parallel_size == 4
    with pytest.raises(ConfigError, match=r"dp_replicate 1 x dp_shard 2 x tp 2 = 4 processes and this run has 2"):
        MeshShape.from_sizes({"dp_shard": 2, "tp": 2}, 2)
    with pytest.raises(ConfigError, match="dp_shard and tp are both -1"):
        MeshShape.from_sizes({"dp_shard": -1, "tp": -1}, 4)
    with pytest.raises(ConfigError, match="3 processes do not divide into the other sizes' product 2"):
        MeshShape.from_sizes({"dp_shard": -1, "tp": 2}, 3)


def test_ranks_of_one_tensor_parallel_group_share_a_data_parallel_rank():
    shape = MeshShape(2, 2, 2)
    assert [data_parallel_coordinates(shape, rank) for rank in range(8)] == [
        (0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 1)]


@pytest.mark.parametrize("parallel, message", [
    ({"mesh": {"tp": 0}}, "parallel.mesh: tp is 0; a size is at least 1, or -1"),
    ({"mesh": {"tp": -1, "dp_shard": -1}}, "dp_shard and tp are both -1"),
    ({"mesh": {"ep": 2}}, "parallel.*ep is no field of it"),
    ({"tensor_parallel": {"plan": {"blocks.*.up": "colwise"}}}, "plan is set and parallel.mesh is not"),
    ({"mesh": {"tp": 1}, "tensor_parallel": {"plan": {"blocks.*.up": "columnwise"}}}, "columnwise"),
])
def test_a_parallel_config_that_cannot_work_is_refused_in_one_line_before_anything_is_built(parallel, message):
    with pytest.raises(ConfigError, match=message) as error:
        LoopOptions.from_config({"parallel": parallel})
    assert "\n" not in str(error.value)


def test_local_sgd_and_a_mesh_are_refused_together():
    with pytest.raises(ConfigError, match="local_sgd and grad_compression apply to strategy ddp, and parallel.mesh"):
        LoopOptions.from_config({"parallel": {"mesh": {"tp": 1}}, "grad_compression": "bf16"})


def test_a_mesh_is_read_as_asked_and_fitted_to_the_processes_once_they_run():
    # the process that launches the others reads the config alone: 4 processes' mesh is no error there
    options = LoopOptions.from_config({"parallel": {"mesh": {"dp_shard": -1, "tp": 2}}})
    assert options.mesh == MeshShape(1, -1, 2) and options.sharded
    assert not LoopOptions.from_config({}).sharded and LoopOptions.from_config({}).mesh is None
    with pytest.raises(ConfigError, match="1 processes do not divide into the other sizes' product 2"):
        build_mesh(options.mesh, torch.device("cpu"))  # the trainer's first step, before any loader or model
    assert build_mesh(MeshShape(1, -1, 1), torch.device("cpu")).shape == MeshShape(1, 1, 1)


def test_a_plan_names_modules_by_patterns_and_refuses_what_does_not_fit():
    model = TensorParallelMLP()
    plan = resolve_plan(model, model.tensor_parallel_plan(2), 2)
    assert sorted(plan) == [f"blocks.{i}.{layer}" for i in range(4) for layer in ("down", "up")]
    with pytest.raises(ConfigError, match=r"'blocks\.\*\.fc' matches no module of TensorParallelMLP \(its modules: "
                                          r"stem, blocks, blocks\.0"):
        resolve_plan(model, {"blocks.*.fc": "colwise"}, 2)
    with pytest.raises(ConfigError, match="blocks.0.up has 64 output features, which tp 3 does not divide"):
        resolve_plan(model, {"blocks.*.up": "colwise"}, 3)
    with pytest.raises(ConfigError, match="blocks.0.norm is a LayerNorm, and colwise and rowwise split Linear"):
        resolve_plan(model, {"blocks.0.norm": "rowwise"}, 2)
    with pytest.raises(ConfigError, match="module blocks.0.up is matched by 'blocks.0.up' and 'blocks.\\*.up'"):
        resolve_plan(model, {"blocks.0.up": "colwise", "blocks.*.up": "colwise"}, 2)


def test_a_mapping_kind_checks_every_key_and_value():
    kind = MappingOf(Text(non_empty=True, meaning="a name"), Text(pattern="[a-z]+", meaning="a word"))
    assert kind.check({"a.b": "colwise"}) == {"a.b": "colwise"}
    with pytest.raises(Invalid, match="a.b is int 3, not a word"):
        kind.check({"a.b": 3})
    with pytest.raises(Invalid):
        kind.check(["a"])


def test_clipping_by_mesh_equals_clip_grad_norm_on_plain_parameters():
    torch.manual_seed(0)
    first, second = nn.Linear(4, 3), nn.Linear(4, 3)
    second.load_state_dict(first.state_dict())
    for model in (first, second):
        model(torch.randn(5, 4, generator=torch.Generator().manual_seed(1))).square().sum().backward()
    expected = nn.utils.clip_grad_norm_(first.parameters(), 0.1)
    assert torch.equal(clip_grad_norm_by_mesh(second.parameters(), 0.1), expected)
    for a, b in zip(first.parameters(), second.parameters()):
        assert torch.equal(a.grad, b.grad)


def test_a_model_the_hook_wrapped_itself_is_refused_under_a_mesh():
    class Wrapping(ToyTrainer):
        def build_model(self, cfg):
            return nn.DataParallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)))

    with pytest.raises(ConfigError, match="build_model returned a DataParallel and parallel.mesh is set: return the "
                                          "model unwrapped"):
        Wrapping(toy_cfg(parallel={"mesh": {"dp_shard": -1}}))


def test_one_process_trains_under_a_mesh_of_one_as_without_one():
    plain, meshed = ToyTrainer(toy_cfg()), ToyTrainer(toy_cfg(parallel={"mesh": {"dp_shard": -1, "tp": 1}}))
    plain.run(), meshed.run()
    assert same_weights(plain.model.state_dict(), meshed.model.state_dict())


# ---------------------------------------------------------------------------------------------- pipelines
@pytest.mark.slow
@pytest.mark.parametrize("name", PIPELINES)
def test_every_pipeline_trains_the_weights_one_process_trains_on_the_union_batch(meshes, name):
    weights, data_parallel = trained(meshes, name)["weights"], JOBS[name][1]
    reference = torch.load(meshes / f"reference{data_parallel}.pt")
    assert sorted(weights) == sorted(reference)  # gathered from every stage, under the model's own names
    assert_close_weights(weights, reference)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pp_ddp", "pp4_1f1b", "pp_fsdp", "pp_tp_interleaved"])
def test_evaluation_and_predict_run_through_the_pipeline_and_count_every_test_sample_once(meshes, name):
    test_evaluation_and_predict_count_every_test_sample_once_whatever_the_layout(meshes, name)


@pytest.mark.slow
def test_an_ema_under_a_pipeline_averages_every_stage_as_one_process_does(meshes):
    run, reference = trained(meshes, "pp_ema"), torch.load(meshes / "reference_ema2.pt")
    assert_close_weights(run["weights"], reference)


@pytest.mark.slow
def test_a_pipeline_resumed_at_the_same_layout_ends_bitwise_where_the_uninterrupted_run_does(meshes):
    assert same_weights(trained(meshes, "pp_resumed")["weights"], trained(meshes, "pp_fsdp")["weights"])


@pytest.mark.slow
@pytest.mark.parametrize("name, uninterrupted", [("pp_to_mesh", "pp_fsdp"), ("pp_single", "pp_fsdp"),
                                                 ("mesh_to_pp", "fsdp_tp")])
def test_a_checkpoint_resumes_across_pipeline_and_other_layouts_with_equal_weights_and_optimizer_state(
        meshes, name, uninterrupted):
    resumed, expected = trained(meshes, name)["weights"], trained(meshes, uninterrupted)["weights"]
    assert_close_weights(resumed, expected)


@pytest.mark.slow
def test_a_stop_signal_during_pipeline_steps_saves_exits_75_and_the_resume_ends_bitwise_equal(meshes):
    """A pipeline of 2 processes per stage (tensor parallel 2), interleaved: SIGTERM reaches the processes while the
    next step's schedule runs; they finish it, agree to stop, save and exit 75."""
    code, stderr = (meshes / "stopped.log").read_text().split("\n", 1)
    assert code == "75" and "stopped by SIGTERM" in stderr, stderr[-3000:]
    assert same_weights(trained(meshes, "after_stop")["weights"], trained(meshes, "pp_tp_interleaved")["weights"])


@pytest.mark.slow
def test_export_writes_whole_weights_from_a_pipeline_checkpoint(meshes, tmp_path):
    cli_main(["export", str(meshes / "pp_fsdp" / "model" / "last"), "--out", str(tmp_path / "w.pth")])
    weights = torch.load(tmp_path / "w.pth", weights_only=True)
    assert same_weights(weights, trained(meshes, "pp_fsdp")["weights"])


@pytest.mark.slow
def test_a_model_whose_forward_calls_another_stages_module_or_a_run_step_override_is_refused_in_one_line(meshes):
    code, stderr = (meshes / "plain.log").read_text().split("\n", 1)
    assert code == "2", stderr[-3000:]
    assert "the model's forward calls a module that another pipeline stage holds (None in this process): skip such " \
           "modules in forward" in stderr
    refused = (meshes / "pp_run_step.error").read_text()
    assert refused.startswith("RunStepTrainer overrides run_step, and a pipeline (parallel.mesh.pp > 1) runs the model")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mesh_lr", "pp_lr"])
def test_an_lr_schedule_deterministic_and_the_watchdog_keep_a_mesh_equal_to_one_process(meshes, name):
    reference = torch.load(meshes / "reference_lr2.pt")
    assert not same_weights(reference, torch.load(meshes / "reference2.pt"))  # the schedule changes the weights
    weights = trained(meshes, name)["weights"]
    assert_close_weights(weights, reference)
