"""The study's plan: each run's command line, and bad input refused in one line before anything is written."""
import json
import sys

import pytest

from basetrainer import cli
from basetrainer.errors import ConfigError
from basetrainer.study import command
from basetrainer.study.plan import StudyPlan


def plan(tmp_path, *train_args, **settings):
    values = {"batch_sizes": [16, 32], "base_batch_size": 64, "out": str(tmp_path / "study"), **settings}
    return StudyPlan.from_settings(values, train_args)


def overrides(arguments) -> dict:
    return dict(argument.split("=", 1) for argument in arguments)


def test_a_run_is_the_train_command_with_the_training_arguments_then_the_keys_the_study_sets(tmp_path):
    line = plan(tmp_path, "-c", "my.yaml", "num_epochs=3").command(32)
    assert line[:6] == [sys.executable, "-m", "basetrainer", "train", "-c", "my.yaml"]
    assert line[6] == "num_epochs=3"
    keys = overrides(line[7:])
    assert keys["batch_size"] == "32" and keys["work_dir"] == str(tmp_path / "study" / "run_bs32")
    assert json.loads(keys["lr_scaling"]) == {"rule": "linear", "base_batch_size": 64}


def test_the_target_goes_to_every_run_with_its_mode_and_stop(tmp_path):
    study = plan(tmp_path, target_metric="test/Acc", target_value=98, stop_at_target=True)
    for batch_size in (16, 32):
        target = json.loads(overrides(study.overrides(batch_size))["target"])
        assert target == {"metric": "test/Acc", "value": 98.0, "mode": "max", "stop": True}


def test_without_a_target_value_the_runs_get_no_target(tmp_path):
    assert "target" not in overrides(plan(tmp_path).overrides(16))


def test_several_processes_make_each_run_distributed_over_as_many_devices(tmp_path):
    keys = overrides(plan(tmp_path, processes=3).overrides(16))
    assert keys["distributed"] == "true" and json.loads(keys["gpu_id"]) == [0, 1, 2]
    assert "distributed" not in overrides(plan(tmp_path).overrides(16))


def test_rule_none_needs_no_base_batch_size(tmp_path):
    study = StudyPlan.from_settings({"batch_sizes": [8], "rule": "none", "out": str(tmp_path)})
    assert json.loads(overrides(study.overrides(8))["lr_scaling"]) == {"rule": "none"}


def test_a_script_replaces_the_train_command(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    line = plan(tmp_path, "lr=0.1", script=str(script)).command(16)
    assert line[:3] == [sys.executable, str(script), "lr=0.1"]


@pytest.mark.parametrize("argv, says", [
    (["--batch-sizes"], "argument --batch-sizes: expected at least one argument"),
    ([], "the following arguments are required: --batch-sizes"),
    (["--batch-sizes", "16", "0"], "argument --batch-sizes: expects an integer >= 1, got 0"),
    (["--batch-sizes", "16", "-8"], "argument --batch-sizes: expects an integer >= 1, got -8"),
    (["--batch-sizes", "16", "32", "16"], "--batch-sizes 16 32 16: 16 given more than once"),
    (["--batch-sizes", "16", "--processes", "0"], "argument --processes: expects an integer >= 1, got 0"),
    (["--batch-sizes", "16", "--rule", "sqrt"], "--rule sqrt scales the lr from the global batch it was tuned at"),
    (["--batch-sizes", "16", "--rule", "none", "--script", "missing.py"], "--script missing.py: no such file"),
    (["--batch-sizes", "16", "--rule", "none", "--", "batch_size=8"], "the study sets batch_size for each run"),
    (["--batch-sizes", "16", "--rule", "none", "--", "--work_dir", "w"], "the study sets work_dir for each run"),
    (["--batch-sizes", "16", "--rule", "none", "--", "--distributed"], "the study sets distributed for each run"),
    (["--batch-sizes", "16", "--rule", "none", "--processes", "2", "--", "gpu_id=[0]"],
     "the study sets gpu_id for each run"),
    (["--batch-sizes", "16", "--rule", "none", "--target-value", "9", "--", "target.value=1"],
     "the study sets target for each run"),
])
def test_bad_input_is_one_line_with_exit_code_2_and_nothing_written(tmp_path, monkeypatch, capsys, argv, says):
    monkeypatch.chdir(tmp_path)
    before = set(tmp_path.iterdir())
    with pytest.raises(SystemExit) as stop:
        command.main(["--out", "study", *argv], prog="basetrainer study")
    err = capsys.readouterr().err
    assert stop.value.code == 2 and says in err and err.startswith("error: ") and err.count("\n") == 1
    assert set(tmp_path.iterdir()) == before


def test_a_training_argument_that_only_names_a_value_is_no_key(tmp_path):
    # "--input_size 8 8": the 8s are values; "--net_type" is a key the study leaves alone
    assert plan(tmp_path, "--input_size", "8", "8", "--net_type", "resnet18").train_args[-1] == "resnet18"


def test_a_folder_holding_a_study_with_other_settings_is_refused(tmp_path):
    first = plan(tmp_path, "num_epochs=2")
    first_dir = tmp_path / "study"
    first_dir.mkdir()
    (first_dir / "study.json").write_text(json.dumps(first.settings()))
    plan(tmp_path, "num_epochs=2", batch_sizes=[64]).check_continues()  # other batch sizes: the same study
    with pytest.raises(ConfigError, match=r"holds a study with other settings \(train_args differ"):
        plan(tmp_path, "num_epochs=3").check_continues()


def test_everything_after_the_double_dash_goes_to_every_run_unchanged():
    study = command.parse_plan(["--batch-sizes", "16", "--rule", "none", "--", "-c", "my.yaml", "--input_size", "8",
                                "8", "lr=0.1"])
    assert study.train_args == ("-c", "my.yaml", "--input_size", "8", "8", "lr=0.1")


def test_the_help_shows_the_usage_and_every_flag(capsys):
    with pytest.raises(SystemExit) as stop:
        command.main(["--help"], prog="basetrainer study")
    out = capsys.readouterr().out
    assert stop.value.code == 0 and out.startswith("usage: basetrainer study --batch-sizes N [N ...] [options] [--")
    for flag in ("--processes", "--out", "--rule", "--base-batch-size", "--target-metric", "--target-value",
                 "--target-mode", "--stop-at-target", "--script"):
        assert flag in out


def test_basetrainer_study_is_this_command(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["study", "--batch-sizes", "0"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.startswith("error: basetrainer study: argument --batch-sizes: expects an integer")
