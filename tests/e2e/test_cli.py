"""The ``basetrainer`` command: --version, and ``train`` running the classification pipeline with its flags."""
import os
import shutil

import pytest
from PIL import Image

import basetrainer
from basetrainer import cli
from support.processes import run_command, run_python


def test_version_flag_prints_the_version():
    result = run_python(["-m", "basetrainer.cli", "--version"])
    assert result.returncode == 0 and result.stdout.strip() == f"basetrainer {basetrainer.__version__}"


def test_python_dash_m_basetrainer_is_the_command():
    result = run_python(["-m", "basetrainer", "--version"])
    assert result.returncode == 0 and result.stdout.strip() == f"basetrainer {basetrainer.__version__}"


@pytest.mark.skipif(shutil.which("basetrainer") is None, reason="the basetrainer command is not on PATH")
def test_installed_command_runs():
    result = run_command(["basetrainer", "--version"], timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == f"basetrainer {basetrainer.__version__}"


def test_train_help_lists_the_pipeline_flags(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["train", "--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0 and out.startswith("usage: basetrainer train")
    for flag in ("--config_file", "--train_data", "--test_data", "--net_type", "--distributed", "--resume",
                 "--finetune", "--use_prune", "KEY=VALUE"):
        assert flag in out


@pytest.mark.parametrize("task", ["classification", "detection", "text"])
def test_train_help_lists_the_flags_the_command_takes_itself(task, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["train", "--task", task, "--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0 and "the train command:" in out
    for flag in ("--task {classification,detection,text}", "--ray N", "--ray_max_failures K", "--train_"):
        assert flag in out


def test_predict_takes_task_classification_as_its_default(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["predict", "--task", "classification", "--checkpoint", str(tmp_path / "none.pth"), "--data",
                  str(tmp_path), "--out", str(tmp_path / "p.csv")])
    assert stop.value.code != 0 and "none.pth" in capsys.readouterr().err


def test_no_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main([])
    assert stop.value.code == 2 and "basetrainer train --help" in capsys.readouterr().err


def test_train_config_errors_are_one_line_with_exit_code_2(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["train", "batch_size=big"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip() == ("error: config key 'batch_size' expects an integer >= 1, got str 'big' "
                                                  "(from the command line)")


def test_train_runs_the_pipeline_from_a_config_file(tmp_path):
    for name in ("left", "right"):
        for split in ("train", "val"):
            os.makedirs(tmp_path / split / name)
            for i in range(8):
                Image.new("RGB", (16, 16), (30 * i, 200 if name == "left" else 0, 0)).save(
                    tmp_path / split / name / f"{i}.png")
    config = tmp_path / "run.yaml"
    config.write_text(f"train_data: {tmp_path / 'train'}\ntest_data: {tmp_path / 'val'}\ninput_size: [16, 16]\n"
                      f"batch_size: 4\nnum_epochs: 1\nprogress: false\nwork_dir: {tmp_path / 'work'}\n")
    cli.main(["train", "-c", str(config), "--batch_size", "8"])
    assert os.path.isfile(tmp_path / "work" / "model" / "model_final.pth")
    assert "batch_size: 8" in (tmp_path / "work" / "config.yaml").read_text()  # the flag beat the file
