"""basetrainer.integrations.ray in this process, without a Ray cluster: its refusals (one line, before any work),
the seam it adds its reporter through, launch adopting a process group made before it, and the metrics it reports.
tests/machines/test_ray_across_machines.py runs it on a cluster of 2 machines."""
import importlib.util
import types

import pytest
import torch.distributed as dist

from basetrainer.cli import main as cli_main
from basetrainer.distributed import comm
from basetrainer.distributed.launch import launch
from basetrainer.engine.added_callbacks import callbacks_added
from basetrainer.engine.events import Callback
from basetrainer.engine.run_summary import RunSummary
from basetrainer.errors import ConfigError
from basetrainer.integrations import ray as on_ray
from support.toy import ToyTrainer, toy_cfg


def command_error(capsys, *argv):
    """``basetrainer ARGV`` in this process: (exit code, what it wrote to stderr)."""
    with pytest.raises(SystemExit) as exit:
        cli_main(list(argv))
    return exit.value.code, capsys.readouterr().err


def test_without_ray_fit_is_a_one_line_error_naming_the_pip_command(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else find_spec(name, *a))
    with pytest.raises(ConfigError, match=r'^running on a Ray cluster needs Ray Train: '
                                          r'pip install "basetrainer\[ray\]"$'):
        on_ray.fit(print, {}, num_workers=2)


@pytest.mark.parametrize("flags", [["--distributed"], ["--gpu_id", "0", "1"]], ids=["distributed", "gpu_ids"])
def test_ray_with_distributed_or_several_gpu_ids_is_refused_in_one_line_leaving_nothing(flags, capsys, tmp_path):
    code, err = command_error(capsys, "train", "--ray", "2", *flags, "--work_dir", str(tmp_path / "work"),
                              "--train_data", str(tmp_path / "missing"))
    assert code != 0 and err.count("\n") == 1
    assert "--ray 2 with distributed" in err and "drop --distributed and the list of gpu ids" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["two", "0"])
def test_a_ray_worker_count_that_is_no_positive_whole_number_is_refused_in_one_line(value, capsys):
    code, err = command_error(capsys, "train", "--ray", value)
    assert code != 0 and err.count("\n") == 1 and f"--ray {value!r}: give a whole number" in err


def test_fit_refuses_a_worker_count_below_one():
    with pytest.raises(ConfigError, match="num_workers must be a positive integer, got 0"):
        on_ray.fit(print, {}, num_workers=0)


class Marker(Callback):
    """A callback a driver adds."""


def test_a_trainer_built_within_callbacks_added_gets_the_drivers_callback_after_its_own():
    own = Callback()
    with callbacks_added(Marker):
        inside = ToyTrainer(toy_cfg(callbacks=[own]))
    outside = ToyTrainer(toy_cfg(callbacks=[own]))
    # then the engine's own: the run summary
    assert [type(callback) for callback in inside.callbacks] == [Callback, Marker, RunSummary]
    assert [type(callback) for callback in outside.callbacks] == [Callback, RunSummary]


@pytest.fixture
def group_made_before(tmp_path, monkeypatch):
    """A one-process gloo group made before launch is called, as Ray Train makes its workers' (LOCAL_RANK set)."""
    monkeypatch.setenv("LOCAL_RANK", "1")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()
    comm.set_local_rank(None)


def where_it_ran():
    return dist.is_initialized(), comm.get_world_size(), comm.get_local_rank()


def test_launch_adopts_a_group_made_before_it_and_spawns_nothing(group_made_before):
    # Spawning would start processes, which this fast test may not (tests/conftest.py fails it).
    assert launch(where_it_ran, num_gpus_per_machine=2, distributed=True) == (True, 1, 1)
    assert dist.is_initialized()  # the group is its owner's to destroy


def test_the_reported_metrics_are_the_logs_numbers_by_phase_with_the_epoch_from_1_and_the_step():
    state = types.SimpleNamespace(epoch=1, global_step=8)
    logs = {"lr": 0.05, "train": {"loss": 0.5}, "test": {"Acc": 91.0, "per_class": {"cat": 90.0}, "name": "val"}}
    assert on_ray.reported_metrics(state, logs) == {"epoch": 2, "step": 8, "lr": 0.05, "train/loss": 0.5,
                                                    "test/Acc": 91.0, "test/per_class/cat": 90.0}
