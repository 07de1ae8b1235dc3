"""Pipeline parallelism in one process (basetrainer.parallel.pipeline and .stages): how a model is read as units, split into
stages and cut down to a process's stages, the microbatch counts, the config, and what is refused. Training through
pipelines on 2 and 4 gloo processes is in tests/parallel/test_mesh.py (one launch with the other layouts)."""
import pytest
import torch
from torch import nn
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
from torch.distributed.pipelining.schedules import PipelineScheduleSingle
from basetrainer.checkpoint.safe_dcp import read_metadata
from basetrainer.checkpoint.sharded import NESTED_OPTIMIZER_KEY, ShardedCheckpointer, _encode
from basetrainer.engine.options import LoopOptions
from basetrainer.errors import ConfigError
from basetrainer.parallel.hybrid import MeshStrategy
from basetrainer.parallel.mesh import Mesh, MeshShape, data_parallel_coordinates, pipeline_rank
from basetrainer.parallel.pipeline import SCHEDULES, microbatch_count
from basetrainer.parallel.plans import SCHEDULE_NAMES, PipelinePlan
from basetrainer.parallel.stages import PassThrough, assign_stages, keep_units, pipeline_units, stage_indices, stage_view
from support.workers.mesh_worker import TensorParallelMLP


def test_a_model_is_read_as_its_top_level_modules_with_the_largest_container_of_blocks_expanded():
    model = TensorParallelMLP()
    assert pipeline_units(model) == ["stem", "blocks.0", "blocks.1", "blocks.2", "blocks.3", "head"]
    assert pipeline_units(nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))) == ["0", "1", "2"]


def test_stages_divide_the_blocks_evenly_with_what_comes_before_and_after_them_at_the_ends():
    model = TensorParallelMLP()
    assert assign_stages(model, 2) == [["stem", "blocks.0", "blocks.1"], ["blocks.2", "blocks.3", "head"]]
    assert assign_stages(model, 3) == [["stem", "blocks.0"], ["blocks.1", "blocks.2"], ["blocks.3", "head"]]
    assert assign_stages(model, 4) == [["stem", "blocks.0"], ["blocks.1"], ["blocks.2"], ["blocks.3", "head"]]


def test_split_points_name_where_stages_begin():
    model = TensorParallelMLP()
    assert assign_stages(model, 2, ["blocks.3"]) == [["stem", "blocks.0", "blocks.1", "blocks.2"],
                                                     ["blocks.3", "head"]]
    assert assign_stages(model, 3, ["blocks.1", "head"]) == [["stem", "blocks.0"],
                                                             ["blocks.1", "blocks.2", "blocks.3"], ["head"]]


@pytest.mark.parametrize("stages, split, message", [
    (2, ["blocks.9"], "names 'blocks.9', which is not a unit of TensorParallelMLP; its units in order: stem, blocks.0"),
    (3, ["blocks.2"], "has 1 point(s) and 3 stages need 2"),
    (3, ["blocks.2", "blocks.1"], "each a later unit than the one before"),
    (2, ["stem"], "(not the first unit)"),
    (5, None, "has 4 block(s) to divide among 5 pipeline stages"),
])
def test_a_split_that_does_not_fit_the_model_is_refused_naming_its_units(stages, split, message):
    with pytest.raises(ConfigError) as error:
        assign_stages(TensorParallelMLP(), stages, split)
    assert message in str(error.value)


def test_a_process_keeps_its_stages_under_their_own_names_and_views_share_them():
    model = TensorParallelMLP()
    whole = {key: value.clone() for key, value in model.state_dict().items()}
    units = pipeline_units(model)
    stages = assign_stages(model, 4)
    keep_units(model, {*stages[0], *stages[2]}, units)  # process 0 of 2 with 2 stages each (looped)
    assert model.head is None and isinstance(model.blocks[1], PassThrough) and isinstance(model.blocks[3], PassThrough)
    kept = model.state_dict()
    assert sorted(kept) == sorted(key for key in whole if key.split(".")[0] == "stem"
                                  or key.startswith(("blocks.0.", "blocks.2.")))
    first, third = stage_view(model, set(stages[0]), units), stage_view(model, set(stages[2]), units)
    assert sorted(first.state_dict()) == sorted(key for key in kept if not key.startswith("blocks.2."))
    assert sorted(third.state_dict()) == sorted(key for key in kept if key.startswith("blocks.2."))
    assert third.blocks[2] is model.blocks[2] and first.stem is model.stem  # the same layers, not copies
    assert model.stem is not None and isinstance(model.blocks[2], nn.Module)  # views leave the model as it was
    x = torch.randn(3, 16)
    torch.testing.assert_close(third(x), model.blocks[2](x))  # a later stage takes the residual stream


def test_the_schedule_names_a_config_takes_are_the_schedules_run_and_say_how_many_stages_each_runs():
    assert sorted(SCHEDULES) == sorted(SCHEDULE_NAMES)
    for name, schedule in SCHEDULES.items():
        assert PipelinePlan(name).single == issubclass(schedule, PipelineScheduleSingle), name


def test_stages_are_placed_looped_and_microbatch_counts_divide_every_batch():
    assert stage_indices(0, 2, 1) == [0] and stage_indices(1, 2, 2) == [1, 3]
    assert [microbatch_count(rows, 4) for rows in (8, 4, 6, 5, 3, 1)] == [4, 4, 3, 1, 3, 1]
    shape = MeshShape(dp_shard=2, tp=2, pp=2)
    assert [pipeline_rank(shape, rank) for rank in range(8)] == [0] * 4 + [1] * 4
    assert [data_parallel_coordinates(shape, rank)[0] for rank in range(8)] == [0, 0, 1, 1] * 2


def test_the_pipeline_config_is_read_and_checked_before_anything_is_built():
    options = LoopOptions.from_config({"parallel": {"mesh": {"pp": 2, "dp_shard": -1},
                                                    "pipeline": {"schedule": "interleaved1f1b", "microbatches": 4}}})
    assert options.mesh == MeshShape(dp_shard=-1, pp=2)
    assert options.pipeline == PipelinePlan("Interleaved1F1B", 4) and options.pipeline.stages(2) == 4
    assert LoopOptions.from_config({"parallel": {"mesh": {"pp": 2}}}).pipeline == PipelinePlan("1F1B")
    assert PipelinePlan("1F1B").microbatches_for(4) == 4


@pytest.mark.parametrize("parallel, message", [
    ({"pipeline": {"schedule": "GPipe"}}, "parallel.pipeline is set and parallel.mesh has no pp dimension"),
    ({"mesh": {"pp": 2}, "pipeline": {"schedule": "GPipe", "stages_per_rank": 2}},
     "schedule GPipe runs one stage per process"),
    ({"mesh": {"pp": 2}, "pipeline": {"split": ["blocks.1", "blocks.2"]}}, "has 2 point(s) and 2 stages need 1"),
    ({"mesh": {"pp": 2}, "pipeline": {"schedule": "ZBVZeroBubble"}}, "schedule is str 'ZBVZeroBubble'"),
    ({"mesh": {"pp": 2}, "pipeline": {"microbatches": 0}}, "microbatches is int 0"),
    ({"mesh": {"pp": 2}, "amp": "fp16"}, "amp: fp16 under a pipeline"),
])
def test_a_pipeline_config_that_cannot_work_is_refused_in_one_line(parallel, message):
    amp = parallel.pop("amp", "none")
    with pytest.raises(ConfigError) as error:
        LoopOptions.from_config({"parallel": parallel, "amp": amp})
    assert message in str(error.value) and "\n" not in str(error.value)


def _split(model, **plan):
    strategy = MeshStrategy(torch.device("cpu"), Mesh(MeshShape(pp=2), None), pipeline=PipelinePlan(**plan))
    return strategy.split(model)


def test_the_first_process_of_a_pipeline_keeps_the_first_stage_of_a_whole_model():
    model = _split(TensorParallelMLP())
    assert model.head is None and isinstance(model.blocks[3], PassThrough) and model.stem is not None


@pytest.mark.parametrize("model, message", [
    (nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2), nn.Linear(2, 2)), "has BatchNorm layers"),
    (type("Scaled", (TensorParallelMLP,), {})(), "holds parameters itself (scale)"),
])
def test_a_model_no_pipeline_can_split_is_refused_naming_why(model, message):
    if type(model).__name__ == "Scaled":
        model.scale = nn.Parameter(torch.ones(1))
    with pytest.raises(ConfigError) as error:
        _split(model)
    assert message in str(error.value)


def test_a_sharded_checkpoint_of_the_nested_optimizer_form_still_loads_and_new_ones_are_flat(tmp_path):
    """Checkpoints written before pipelines keep the optimizer's settings as one list of names per group (the
    processes of a pipeline would collide there); they load as they did. New ones are keyed by parameter name."""
    torch.manual_seed(0)
    model = TensorParallelMLP()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    old = tmp_path / "old"
    dcp.save({"model": model.state_dict(), "optimizer": get_optimizer_state_dict(model, optimizer),
              "loop": _encode({"iteration": 1})}, checkpoint_id=str(old), no_dist=True)
    for source in (old, tmp_path / "new"):
        fresh = TensorParallelMLP()
        fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=0.5)
        assert ShardedCheckpointer().load(fresh, fresh_optimizer, str(source))["iteration"] == 1
        assert fresh_optimizer.param_groups[0]["lr"] == 0.01
        for parameter, restored in zip(model.parameters(), fresh.parameters()):
            torch.testing.assert_close(fresh_optimizer.state[restored]["exp_avg"], optimizer.state[parameter]["exp_avg"],
                                       rtol=0, atol=0)
        if source == old:
            ShardedCheckpointer().save(fresh, fresh_optimizer, str(tmp_path / "new"), {"iteration": 1})
    keys = read_metadata(str(tmp_path / "new")).state_dict_metadata
    assert NESTED_OPTIMIZER_KEY in read_metadata(str(old)).state_dict_metadata and NESTED_OPTIMIZER_KEY not in keys
    assert "optimizer.param_groups.blocks.0.up.weight.lr" in keys
