"""Checkpoints: exact resume after a kill, atomic writes, safe loading, fine-tuning, export."""
import os
import pickle
import time

import pytest
import torch
import torch.nn as nn

from basetrainer.callbacks.losses_recorder import LossesRecorder
from basetrainer.callbacks.model_checkpoint import ModelCheckpoint
from basetrainer.checkpoint import load_checkpoint, load_weights, save_checkpoint
from basetrainer.checkpoint import read_model_weights as load_state_dict
from basetrainer.checkpoint.discovery import find_checkpoints
from basetrainer.errors import CheckpointError
from support.compare import load_result, same_weights
from support.hostile import Payload as _Payload
from support.toy import ToyTrainer, toy_cfg


@pytest.mark.slow
@pytest.mark.parametrize("procs, kill_at", [(1, "1:7"), (2, "1:3")])
def test_resume_after_sigkill_mid_epoch_ends_bit_for_bit_like_an_uninterrupted_run(tiny, tmp_path, uninterrupted,
                                                                                     procs, kill_at):
    flags = ["--procs", procs, "--work-dir", tmp_path, "--out", tmp_path / "w.pt", "--every-n-iters", 2]
    killed = tiny(*flags, "--kill-at", kill_at, check=False)
    assert killed.returncode != 0 and not (tmp_path / "w.pt").exists()
    state = load_checkpoint(str(tmp_path / "model" / "last.pth"))
    assert state["epoch"] == 1 and 0 < state["batch"] <= int(kill_at.split(":")[1])  # a mid-epoch checkpoint
    tiny(*flags, "--resume", "auto")
    resumed, reference = load_result(tmp_path / "w.pt"), load_result(uninterrupted / f"p{procs}.pt")
    assert same_weights(resumed["weights"], reference["weights"])
    assert resumed["logs"] == reference["logs"]  # the same logged metrics and lr after the resume point


def test_a_pickle_with_a_code_payload_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    hostile = tmp_path / "hostile.pth"
    torch.save({"model": {"w": torch.zeros(1)}, "extra": _Payload(str(marker))}, hostile)
    with pytest.raises(CheckpointError, match=r"refusing to load .*hostile.pth: it needs arbitrary code"):
        load_checkpoint(str(hostile))
    assert not marker.exists()


def test_resuming_from_a_hostile_file_is_refused_too(tmp_path):
    marker = tmp_path / "pwned"
    hostile = tmp_path / "last.pth"
    with open(hostile, "wb") as f:
        pickle.dump(_Payload(str(marker)), f)
    with pytest.raises(CheckpointError):
        ToyTrainer(toy_cfg(resume=str(hostile))).run()
    assert not marker.exists()


def test_a_truncated_checkpoint_is_a_one_line_error(tmp_path):
    good = tmp_path / "good.pth"
    save_checkpoint({"model": {"w": torch.randn(100, 100)}}, str(good))
    truncated = tmp_path / "truncated.pth"
    truncated.write_bytes(good.read_bytes()[:5000])
    with pytest.raises(CheckpointError, match=r"truncated.pth is truncated or not a checkpoint") as e:
        load_checkpoint(str(truncated))
    assert "\n" not in str(e.value)


def test_a_file_that_is_not_a_checkpoint_is_a_one_line_error(tmp_path):
    text = tmp_path / "notes.pth"
    text.write_text("these are not weights")
    with pytest.raises(CheckpointError, match="notes.pth is"):
        load_checkpoint(str(text))


def test_resume_from_a_path_that_does_not_exist_names_it(tmp_path):
    with pytest.raises(CheckpointError, match=r"resume: no checkpoint at .*missing.pth; check the path"):
        ToyTrainer(toy_cfg(resume=str(tmp_path / "missing.pth"))).run()


def test_resume_from_another_models_checkpoint_names_the_layers(tmp_path):
    trainer = ToyTrainer(toy_cfg(num_epochs=1))
    state = trainer.state_dict()
    state["model"]["2.weight"] = torch.zeros(10, 16)
    save_checkpoint(state, str(tmp_path / "other.pth"))
    with pytest.raises(CheckpointError, match=r"other.pth was written by another model: \[shape differs: 2.weight "
                                              r"\(10, 16\) vs \(4, 16\)\]"):
        ToyTrainer(toy_cfg(resume=str(tmp_path / "other.pth"))).run()


def test_resume_auto_without_a_checkpoint_starts_from_scratch(tmp_path):
    trainer = ToyTrainer(toy_cfg(num_epochs=1, resume="auto", work_dir=str(tmp_path)))
    trainer.run()
    assert trainer.iteration == trainer.num_steps


def test_resuming_a_finished_run_says_it_is_complete_and_how_to_train_longer(tmp_path, caplog):
    ToyTrainer(toy_cfg(num_epochs=1, callbacks=[ModelCheckpoint(model_dir=str(tmp_path))])).run()
    with caplog.at_level("INFO", logger="basetrainer"):
        trainer = ToyTrainer(toy_cfg(num_epochs=1, resume="auto", work_dir=str(tmp_path)))
        trainer.run()
    assert trainer.iteration == trainer.num_steps  # restored; nothing more trained
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 'last.pth'} is a finished run: all 1 epochs are trained, so there is nothing to do; "
        f"to train longer, raise num_epochs and resume again"]


def test_start_up_removes_the_temporary_file_of_a_save_cut_short(tmp_path):
    leftover = tmp_path / ".last.pth.k2j4x8.tmp"
    leftover.write_bytes(b"PK half a checkpoint")
    ToyTrainer(toy_cfg(num_epochs=1, callbacks=[ModelCheckpoint(model_dir=str(tmp_path))])).run()
    assert not leftover.exists() and (tmp_path / "last.pth").exists()


def test_a_resumed_run_keeps_only_the_best_models_its_restored_state_counts(tmp_path):
    def checkpointer():
        return ModelCheckpoint(model_dir=str(tmp_path), indicator="loss", mode="min", save_best_k=1)

    ToyTrainer(toy_cfg(num_epochs=1, callbacks=[LossesRecorder(), checkpointer()])).run()
    # saved after last.pth by a run then killed: the resumed state does not know it
    stray = tmp_path / "best_model_002_0.0001.pth"
    stray.write_bytes((tmp_path / "model_final.pth").read_bytes())
    ToyTrainer(toy_cfg(num_epochs=2, resume="auto", work_dir=str(tmp_path),
                       callbacks=[LossesRecorder(), checkpointer()])).run()
    assert len([p for p in os.listdir(tmp_path) if p.startswith("best_model_")]) == 1
    assert not stray.exists()


def test_a_resumed_run_leaves_the_best_models_another_run_left_in_its_folder_alone(tmp_path):
    def checkpointer():
        return ModelCheckpoint(model_dir=str(tmp_path), indicator="loss", mode="min", save_best_k=1)

    earlier = tmp_path / "best_model_009_0.0001.pth"  # a run's that ended before this one started
    earlier.write_bytes(b"an earlier run's best model")
    os.utime(earlier, (time.time() - 3600, time.time() - 3600))
    ToyTrainer(toy_cfg(num_epochs=1, callbacks=[LossesRecorder(), checkpointer()])).run()
    ToyTrainer(toy_cfg(num_epochs=2, resume="auto", work_dir=str(tmp_path),
                       callbacks=[LossesRecorder(), checkpointer()])).run()
    assert earlier.read_bytes() == b"an earlier run's best model"


def test_the_best_models_a_restored_state_names_are_files_of_its_own_folder_and_count_though_missing(tmp_path):
    own, other = tmp_path / "1" / "model", tmp_path / "0" / "model"  # a replica group took group 0's state
    other.mkdir(parents=True)
    (other / "best_model_003_90.0000.pth").write_bytes(b"group 0's")
    checkpointer = ModelCheckpoint(model_dir=str(own), indicator="acc")
    checkpointer.load_state_dict({"best": [[90.0, 2, str(other / "best_model_003_90.0000.pth")]], "run_started": 0.0})
    checkpointer.model = nn.Linear(2, 2)
    checkpointer.on_epoch_end(3, {"test": {"acc": 80.0}})  # worse than the best it counts: no best model kept
    assert [p.name for p in own.iterdir() if p.name.startswith("best_model_")] == []
    checkpointer.on_epoch_end(4, {"test": {"acc": 95.0}})
    assert checkpointer.best == [(95.0, 4, str(own / "best_model_005_95.0000.pth"))]
    assert (other / "best_model_003_90.0000.pth").read_bytes() == b"group 0's"  # another group's, left alone


def test_resume_auto_passes_over_checkpoints_written_before_the_time_given(tmp_path):
    ToyTrainer(toy_cfg(num_epochs=1, callbacks=[ModelCheckpoint(model_dir=str(tmp_path))])).run()
    last = str(tmp_path / "last.pth")
    assert find_checkpoints("auto", work_dir=str(tmp_path), written_since=time.time() - 3600) == [last]
    assert find_checkpoints("auto", work_dir=str(tmp_path), written_since=time.time() + 1) == []
    assert find_checkpoints(last, work_dir=str(tmp_path), written_since=time.time() + 1) == [last]  # named: taken


def _resume_warnings(tmp_path, caplog, **changes):
    ToyTrainer(toy_cfg(num_epochs=1, lr=0.1, callbacks=[ModelCheckpoint(model_dir=str(tmp_path))])).run()
    cfg = toy_cfg(**{"num_epochs": 1, "lr": 0.1, "resume": str(tmp_path / "last.pth"), **changes})
    with caplog.at_level("WARNING", logger="basetrainer"):
        ToyTrainer(cfg).run()
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


def test_resuming_with_other_training_settings_names_each_change_in_one_warning(tmp_path, caplog):
    warnings = _resume_warnings(tmp_path, caplog, num_epochs=2, lr=0.05)
    assert len(warnings) == 1
    assert "last.pth was written with other settings (num_epochs 1 -> 2, lr 0.1 -> 0.05)" in warnings[0]


def test_resuming_with_the_same_settings_warns_of_no_change(tmp_path, caplog):
    assert [w for w in _resume_warnings(tmp_path, caplog) if "other settings" in w] == []


def test_a_full_checkpoint_holds_only_plain_types_and_everything_a_continuation_needs(tmp_path):
    checkpointer = ModelCheckpoint(model_dir=str(tmp_path))
    ToyTrainer(toy_cfg(num_epochs=1, callbacks=[checkpointer], amp="bf16")).run()
    state = torch.load(tmp_path / "last.pth", weights_only=True)
    assert {"model", "optimizer", "scaler", "callbacks", "rng", "config", "epoch", "batch", "iteration",
            "basetrainer_version"} <= state.keys()
    assert {"python", "numpy", "torch"} <= state["rng"][0].keys()

    def walk(value):
        if isinstance(value, dict):
            return all(isinstance(k, (str, int)) and walk(v) for k, v in value.items())
        if isinstance(value, (list, tuple)):
            return all(walk(v) for v in value)
        return value is None or isinstance(value, (str, int, float, bool, torch.Tensor))

    assert walk(state)


def test_weights_are_saved_without_wrapper_prefixes(tmp_path):
    model = nn.DataParallel(nn.Sequential(nn.Linear(4, 2)))
    checkpointer = ModelCheckpoint(model, torch.optim.SGD(model.parameters(), lr=0.1), moder_dir=str(tmp_path))
    checkpointer.on_epoch_end(0, {})
    checkpointer.on_train_end({})
    assert list(load_checkpoint(str(tmp_path / "last.pth"))["model"]) == ["0.weight", "0.bias"]
    assert list(torch.load(tmp_path / "model_final.pth", weights_only=True)) == ["0.weight", "0.bias"]


def test_model_dir_is_accepted_under_its_old_and_new_spelling(tmp_path):
    assert ModelCheckpoint(moder_dir=str(tmp_path)).model_dir == ModelCheckpoint(model_dir=str(tmp_path)).model_dir


def test_only_the_best_k_models_are_kept(tmp_path):
    checkpointer = ModelCheckpoint(model_dir=str(tmp_path), indicator="acc", save_best_k=2)
    ToyTrainer(toy_cfg(num_epochs=1, callbacks=[checkpointer]))  # attaches nothing: drive it by hand
    checkpointer.model = nn.Linear(2, 2)
    for epoch, acc in enumerate([50.0, 70.0, 60.0, 40.0, 80.0]):
        checkpointer.on_epoch_end(epoch, {"test": {"acc": acc}})
    best = sorted(p for p in os.listdir(tmp_path) if p.startswith("best_model_"))
    assert best == ["best_model_002_70.0000.pth", "best_model_005_80.0000.pth"]  # epochs counted from 1


def test_lower_is_better_with_inverse(tmp_path):
    checkpointer = ModelCheckpoint(model=nn.Linear(2, 2), model_dir=str(tmp_path), indicator="loss", inverse=True)
    for epoch, loss in enumerate([0.5, 0.3, 0.4]):
        checkpointer.on_epoch_end(epoch, {"test": {"loss": loss}})
    assert [p for p in os.listdir(tmp_path) if p.startswith("best_model_")] == ["best_model_002_0.3000.pth"]


def test_finetuning_a_3_class_head_from_a_10_class_checkpoint_skips_the_head_with_one_warning(tmp_path, caplog):
    ten = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 10))
    save_checkpoint({"model": ten.state_dict()}, str(tmp_path / "ten.pth"))
    three = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    with caplog.at_level("WARNING", logger="basetrainer"):
        report = load_weights(three, str(tmp_path / "ten.pth"))
    assert report["skipped"] == ["2.weight", "2.bias"]
    assert torch.equal(three[0].weight, ten[0].weight)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "2.weight (10, 16) vs (3, 16)" in warnings[0]


def test_strict_finetuning_refuses_a_head_of_another_shape(tmp_path):
    save_checkpoint({"model": nn.Linear(16, 10).state_dict()}, str(tmp_path / "ten.pth"))
    with pytest.raises(CheckpointError, match=r"does not fit the model: \[shape differs: weight \(10, 16\) vs \(3, 16\)"):
        load_weights(nn.Linear(16, 3), str(tmp_path / "ten.pth"), strict=True)


@pytest.mark.parametrize("layout", ["checkpoint", "bare", "data_parallel", "state_dict_key"])
def test_load_state_dict_reads_every_layout_we_meet(tmp_path, layout):
    model = nn.Linear(3, 2)
    sd = model.state_dict()
    obj = {"checkpoint": {"model": sd, "epoch": 3}, "bare": sd,
           "data_parallel": {"module." + k: v for k, v in sd.items()}, "state_dict_key": {"state_dict": sd}}[layout]
    torch.save(obj, tmp_path / "w.pth")
    loaded = load_state_dict(str(tmp_path / "w.pth"))
    assert same_weights(loaded, sd)


def test_model_checkpoint_is_called_per_batch_only_when_saving_at_intervals(tmp_path):
    from basetrainer.engine.events import CallbackList

    per_epoch = CallbackList([ModelCheckpoint(model_dir=str(tmp_path / "a"))])
    every_5 = CallbackList([ModelCheckpoint(model_dir=str(tmp_path / "b"), every_n_iters=5)])
    every_minute = CallbackList([ModelCheckpoint(model_dir=str(tmp_path / "c"), every_n_minutes=1)])
    assert per_epoch.handlers("on_batch_end") == []
    assert per_epoch.handlers("on_epoch_end") == [per_epoch.callbacks[0].on_epoch_end]
    assert len(every_5.handlers("on_batch_end")) == len(every_minute.handlers("on_batch_end")) == 1
