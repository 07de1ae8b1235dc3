"""Hyper-parameter search: Optuna's pruning callback and examples/hpo.py, NNI's trial API, the trial's config."""
import importlib
import json
import logging
import os
import re
import sys
from importlib.metadata import metadata

import pytest
import yaml
from PIL import Image

from basetrainer.callbacks import LossesRecorder
from basetrainer.errors import ConfigError
from basetrainer.hpo import import_extra
from basetrainer.hpo.classification import trial_config
from support import REPO
from support.packaging import names
from support.processes import run_python
from support.toy import EventLog, ToyTrainer, toy_cfg

optuna = pytest.importorskip("optuna")
from basetrainer.hpo.optuna import OptunaPruning  # noqa: E402  (after the skip: it needs optuna)

ROOT = str(REPO)
HPO = os.path.join(ROOT, "examples", "hpo.py")


def toy_objective(pruning_of, events, **cfg):
    """An Optuna objective training the toy trainer (3 epochs of 8 batches) with the test loss published."""

    def objective(trial):
        pruning = pruning_of(trial)
        ToyTrainer(toy_cfg(**{"num_epochs": 3, **cfg}, callbacks=[LossesRecorder(), pruning, events])).run()
        pruning.raise_if_pruned()
        return pruning.final_value

    return objective


def study_of_one_toy_trial(pruner, events=None, **cfg):
    study = optuna.create_study(direction="minimize", pruner=pruner)
    objective = toy_objective(lambda trial: OptunaPruning(trial, indicator="loss"), events or EventLog(), **cfg)
    study.optimize(objective, n_trials=1)
    return study.trials[0]


# ---------------------------------------------------------------------- Optuna


def test_a_trial_the_pruner_prunes_stops_after_that_evaluation_and_is_recorded_as_pruned():
    events = EventLog()
    trial = study_of_one_toy_trial(optuna.pruners.ThresholdPruner(upper=0.0), events)  # any loss is too high
    assert trial.state == optuna.trial.TrialState.PRUNED
    assert list(trial.intermediate_values) == [1]
    names = [event[0] for event in events.events]
    assert names.count("on_epoch_end") == 1
    assert names[-1] == "on_train_end" and "on_exception" not in names  # the run ended as runs do


def test_a_trial_the_pruner_keeps_reports_every_epoch_and_returns_the_last_value():
    trial = study_of_one_toy_trial(optuna.pruners.ThresholdPruner(upper=1e9))
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert list(trial.intermediate_values) == [1, 2, 3]
    assert trial.value == trial.intermediate_values[3]


def test_evaluations_every_n_iters_are_reported_at_their_global_step():
    trial = study_of_one_toy_trial(optuna.pruners.NopPruner(), num_epochs=None, max_iters=12, eval_every_n_iters=4)
    assert list(trial.intermediate_values) == [4, 8, 12]


def test_an_indicator_the_evaluation_does_not_give_is_a_config_error_naming_those_it_gave():
    study = optuna.create_study()
    objective = toy_objective(lambda trial: OptunaPruning(trial, indicator="Acc"), EventLog())
    with pytest.raises(ConfigError, match=r"no 'Acc' \(it gave loss\)"):
        study.optimize(objective, n_trials=1)


def test_a_missing_search_library_is_a_one_line_error_naming_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)  # as if optuna were not installed
    monkeypatch.delitem(sys.modules, "basetrainer.hpo.optuna")
    with pytest.raises(ConfigError, match=r'^hyper-parameter search with optuna needs the optuna package: '
                                          r'pip install "basetrainer\[hpo\]"$'):
        importlib.import_module("basetrainer.hpo.optuna")


def test_import_extra_names_the_extra_for_any_missing_package():
    with pytest.raises(ConfigError, match=r'pip install "basetrainer\[nni\]"'):
        import_extra("a_package_that_is_not_installed", "nni")


@pytest.mark.slow
def test_the_hpo_example_runs_3_trials_into_its_sqlite_study_and_prints_the_best_config(tmp_path):
    result = run_python([HPO, "--trials", 3, "num_epochs=1", "input_size=[8,8]", "net_type=shufflenet_v2_x0_5",
                         "--no-progress"], cwd=tmp_path, timeout=300)  # the search, not the model: a fast one
    assert result.returncode == 0, result.stderr[-4000:]
    work_dir = tmp_path / "work_dirs" / "hpo"
    study = optuna.load_study(study_name="classification", storage=f"sqlite:///{work_dir / 'study.db'}")
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 3
    assert all(list(t.intermediate_values) == [1] for t in study.trials)  # one epoch, one report
    assert sorted(os.listdir(work_dir)) == ["study.db", "trial_0", "trial_1", "trial_2"]
    best = study.best_trial
    assert f"best trial {best.number}: Acc {best.value:.2f}" in result.stdout
    printed = yaml.safe_load(result.stdout.split(f"its config, {best.user_attrs['config']}:\n", 1)[1])
    assert {key: printed[key] for key in best.params} == best.params
    assert printed["work_dir"] == os.path.join("work_dirs", "hpo", f"trial_{best.number}")


def test_optuna_is_the_hpo_extra_and_the_all_extra_holds_every_other_extra():
    extras = set(metadata("basetrainer").get_all("Provides-Extra")) - {"all", "test", "docs"}  # tools, not features
    assert "optuna" in names("hpo") and "optuna" not in names()
    assert names("all") == set().union(*map(names, extras))


# ---------------------------------------------------------------------- a trial's config


def test_a_trials_values_are_set_over_the_config_and_it_trains_in_its_own_folder():
    cfg = trial_config(["--num_epochs", "1", "lr=0.5"], {"lr": 0.01, "weight_decay": 1e-05, "milestones": [2, 3]},
                       "trial_4")
    assert (cfg.lr, cfg.weight_decay, cfg.milestones, cfg.num_epochs) == (0.01, 1e-05, [2, 3], 1)
    assert cfg.work_dir == os.path.join("work_dirs", "classification", "trial_4")


@pytest.mark.parametrize("params, message", [({"lrr": 0.1}, "unknown config key 'lrr'.*did you mean 'lr'"),
                                             ({"batch_size": "many"},
                                              "'batch_size' expects an integer >= 1, got str 'many'")])
def test_a_search_space_with_an_unknown_key_or_a_wrong_type_is_a_config_error(params, message):
    with pytest.raises(ConfigError, match=message):
        trial_config([], params, "trial_0")


def test_a_distributed_trial_is_refused():
    with pytest.raises(ConfigError, match="drop --distributed"):
        trial_config(["--distributed"], {}, "trial_0")


# ---------------------------------------------------------------------- NNI


@pytest.fixture
def tiny_images(tmp_path):
    """2 classes x 4 training and 4 test images of 16x16, and the flags that train on them for 2 epochs."""
    for split in ("train", "val"):
        for label, red in (("a", 220), ("b", 20)):
            os.makedirs(tmp_path / split / label)
            for i in range(4):
                Image.new("RGB", (16, 16), (red, 90, 40 * i)).save(tmp_path / split / label / f"{i}.png")
    return [f"--train_data={tmp_path / 'train'}", f"--test_data={tmp_path / 'val'}", "--input_size", "16", "16",
            "--batch_size", "2", "--num_epochs", "2", "--no-progress", f"--work_dir={tmp_path / 'work'}"]


def test_an_nni_trial_outside_an_experiment_trains_the_config_as_given_and_reports_each_evaluation(
        tiny_images, tmp_path, caplog):
    pytest.importorskip("nni", reason="nni is not installed (pip install 'basetrainer[nni]')")
    from basetrainer.hpo import nni as nni_trial

    caplog.set_level(logging.INFO, logger="nni")
    with pytest.warns(RuntimeWarning, match="without runtime"):  # NNI's standalone mode: get_next_parameter() is {}
        nni_trial.main([*tiny_images, "lr=0.02"])
    trial_dir = tmp_path / "work" / "STANDALONE" / "trial_0"
    assert yaml.safe_load((trial_dir / "config.yaml").read_text())["lr"] == 0.02
    with open(trial_dir / "log" / "history.jsonl") as stream:
        accuracies = [json.loads(line)["test"]["Acc"] for line in stream]
    messages = [record.getMessage() for record in caplog.records if record.name == "nni"]
    intermediate = [float(m.split()[2]) for m in messages if m.startswith("Intermediate result:")]
    final = [float(m.split()[2]) for m in messages if m.startswith("Final result:")]
    assert intermediate == pytest.approx(accuracies) and len(accuracies) == 2
    assert final == pytest.approx(accuracies[-1:])


@pytest.mark.slow
def test_an_nni_trial_sets_the_parameters_nni_gives_over_the_config_and_reports_the_last_accuracy(tiny_images,
                                                                                                   tmp_path):
    pytest.importorskip("nni", reason="nni is not installed (pip install 'basetrainer[nni]')")
    # NNI's own test platform (NNI_PLATFORM=unittest) hands out the parameters given to init_params.
    script = ("import json, sys\n"
              "from nni.runtime.platform import test as platform\n"
              "platform.init_params({'parameter_id': 7, 'parameters': {'lr': 0.03, 'weight_decay': 0.0}})\n"
              "from basetrainer.hpo import nni as nni_trial\n"
              "nni_trial.main(sys.argv[1:])\n"
              "print('LAST METRIC', json.dumps(platform.get_last_metric()))\n")
    result = run_python(["-c", script, *tiny_images], env={"NNI_PLATFORM": "unittest"}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    trial_dir = tmp_path / "work" / "fakeidex" / "trial_0"  # the test platform's experiment id
    saved = yaml.safe_load((trial_dir / "config.yaml").read_text())
    assert (saved["lr"], saved["weight_decay"]) == (0.03, 0.0)
    metric = json.loads(re.search(r"LAST METRIC (.*)", result.stdout).group(1))
    with open(trial_dir / "log" / "history.jsonl") as stream:
        last_accuracy = [json.loads(line)["test"]["Acc"] for line in stream][-1]
    assert (metric["type"], metric["parameter_id"]) == ("FINAL", 7)
    assert metric["value"] == pytest.approx(last_accuracy)
