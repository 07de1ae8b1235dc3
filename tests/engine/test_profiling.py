"""``profile: true`` / ``profile_steps``: a few training batches under torch.profiler, a Chrome trace that
TensorBoard's profiler plugin reads, the top operators once; nothing at all when off."""
import gc
import glob
import json
import os

import pytest
import torch

from basetrainer.engine.events import Callback
from basetrainer.engine.options import LoopOptions
from basetrainer.engine.profiling import Profiler
from basetrainer.errors import ConfigError
from basetrainer.tasks import classification
from basetrainer.utils.log import set_logger
from support.toy import ToyTrainer, toy_cfg


class ProfilerProbe(Callback):
    """Records, at every batch end, whether the autograd profiler is on, and at train begin the
    profiler objects alive and the builtin Profiler callbacks of the run."""

    def __init__(self):
        super().__init__()
        self.enabled = []

    def on_train_begin(self, logs=None):
        gc.collect()
        self.live_profilers = [o for o in gc.get_objects() if type(o) is torch.profiler.profile]
        self.profiler_callbacks = [cb for cb in self.trainer.events.callbacks if isinstance(cb, Profiler)]

    def on_batch_end(self, batch, logs=None):
        self.enabled.append(torch.autograd.profiler._is_profiler_enabled)


def traces(folder):
    return sorted(glob.glob(os.path.join(folder, "log", "profile", "*.pt.trace.json")))


def train_toy(work_dir, **cfg):
    probe = ProfilerProbe()
    ToyTrainer(toy_cfg(work_dir=str(work_dir), callbacks=[probe], **cfg)).run()  # 2 epochs of 8 batches
    return probe


def event_names(path):
    with open(path) as stream:
        return [event.get("name", "") for event in json.load(stream)["traceEvents"]]


def test_profile_true_writes_a_chrome_trace_of_training_operators_to_work_dir_log_profile(tmp_path):
    train_toy(tmp_path, profile=True)
    [trace] = traces(tmp_path)
    assert os.path.basename(trace).startswith("rank0.")
    names = event_names(trace)
    assert "aten::addmm" in names  # the Linear layers' forward
    assert any(name.startswith("autograd::engine::evaluate_function: AddmmBackward") for name in names)
    assert "Optimizer.step#SGD.step" in names


def test_profile_true_traces_batches_2_to_4_after_one_untraced_and_one_warm_up(tmp_path):
    probe = train_toy(tmp_path, profile=True)
    [trace] = traces(tmp_path)
    steps = sorted({name for name in event_names(trace) if name.startswith("ProfilerStep#")})
    assert steps == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert probe.enabled[:6] == [False, False, True, True, True, False]  # warm-up: the tracer starts, records nothing
    assert not any(probe.enabled[6:])


def test_profile_steps_choose_how_many_batches_wait_warm_up_and_are_kept(tmp_path):
    train_toy(tmp_path, profile_steps=[3, 1, 2])
    [trace] = traces(tmp_path)
    assert sorted({n for n in event_names(trace) if n.startswith("ProfilerStep#")}) == ["ProfilerStep#4",
                                                                                          "ProfilerStep#5"]


def test_tensorboards_profiler_plugin_reads_the_trace_with_its_steps_and_operators(tmp_path):
    plugin = pytest.importorskip("torch_tb_profiler")
    from torch_tb_profiler.profiler.data import RunProfileData
    from torch_tb_profiler.profiler.run_generator import RunGenerator

    train_toy(tmp_path, profile=True)
    [trace] = traces(tmp_path)
    worker = plugin.consts.WORKER_PATTERN.match(os.path.basename(trace)).group(1)  # how the plugin finds traces
    assert worker == "rank0"
    profile = RunGenerator(worker, None, RunProfileData.parse(worker, None, trace, str(tmp_path))).generate_run_profile()
    assert [row[0] for row in profile.overview["steps"]["rows"]] == ["2", "3", "4"]
    assert "aten::addmm" in {row["name"] for row in profile.operation_table_by_name["data"]}


def test_the_top_operators_table_is_printed_once_to_stdout(tmp_path, capsys):
    set_logger(level="info")
    train_toy(tmp_path, profile=True, num_epochs=3)
    out = capsys.readouterr().out
    assert out.count("the operators by self time") == 1
    assert out.count("Self CPU time total") == 1
    assert os.path.abspath(tmp_path / "log" / "profile") in out


def test_a_run_shorter_than_the_window_writes_the_batches_it_traced(tmp_path):
    train_toy(tmp_path, profile_steps=[1, 1, 100], num_epochs=1)  # 8 batches
    [trace] = traces(tmp_path)
    steps = {n for n in event_names(trace) if n.startswith("ProfilerStep#")}
    assert {f"ProfilerStep#{i}" for i in range(2, 8)} <= steps  # and #8: what came after the last batch


def test_without_a_work_dir_the_trace_goes_to_log_profile_in_the_current_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ToyTrainer(toy_cfg(profile=True)).run()
    assert len(traces(tmp_path)) == 1


def test_profiling_off_creates_no_profiler_and_never_enables_it(tmp_path):
    probe = train_toy(tmp_path)
    assert probe.live_profilers == [] and probe.profiler_callbacks == []
    assert len(probe.enabled) == 16 and not any(probe.enabled)
    assert not (tmp_path / "log" / "profile").exists()


@pytest.mark.parametrize("steps", [[1, 1], [1, 1, 0], [-1, 1, 3], "1,1,3", [1.0, 1, 3]])
def test_profile_steps_other_than_three_counts_with_one_active_batch_is_a_config_error(tmp_path, steps):
    with pytest.raises(ConfigError, match=r"config key 'profile_steps' expects \[wait, warmup, active\]: an integer "
                                          r">= 0, an integer >= 0, an integer >= 1 or null, got "):
        ToyTrainer(toy_cfg(work_dir=str(tmp_path), profile_steps=steps))


@pytest.mark.parametrize("argv, steps", [([], None), (["profile=true"], (1, 1, 3)),
                                           (["profile_steps=[0,2,5]"], (0, 2, 5))])
def test_the_example_reads_profile_and_profile_steps_from_its_config(argv, steps):
    cfg = classification.parse_config(argv)
    assert LoopOptions.from_config(cfg, torch.device("cpu")).profile_steps == steps
