"""``basetrainer lr-find`` and ``batch-find`` read the task's flags and their own, and refuse bad input in one
line before any work: no data written, no work_dir made."""
import pytest

from basetrainer import cli
from basetrainer.tuning import batch_find_command, lr_find_command


def refused(argv, tmp_path, monkeypatch, capsys) -> str:
    monkeypatch.chdir(tmp_path)  # where the digits would be written
    with pytest.raises(SystemExit) as stop:
        cli.main([*argv, "--work_dir", str(tmp_path / "work")])
    error = capsys.readouterr().err
    assert stop.value.code == 2 and error.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # nothing on disk
    return error.strip()


def test_max_lr_not_above_min_lr_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    error = refused(["lr-find", "--min_lr", "1", "--max_lr", "0.5"], tmp_path, monkeypatch, capsys)
    assert error.startswith("error: max_lr 0.5 is not above min_lr 1: the sweep goes up from min_lr to max_lr")


def test_a_tool_flag_out_of_range_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    error = refused(["lr-find", "--num_steps", "1"], tmp_path, monkeypatch, capsys)
    assert error == ("error: basetrainer lr-find: argument --num_steps: expects an integer >= 2, got 1; "
                     "see basetrainer lr-find --help")


def test_a_bad_config_value_is_refused_as_train_refuses_it(tmp_path, monkeypatch, capsys):
    error = refused(["batch-find", "batch_size=big"], tmp_path, monkeypatch, capsys)
    assert error == "error: config key 'batch_size' expects an integer >= 1, got str 'big' (from the command line)"


def test_a_negative_memory_budget_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    error = refused(["batch-find", "--max_memory", "-5"], tmp_path, monkeypatch, capsys)
    assert "argument --max_memory: expects a number > 0, got -5" in error


@pytest.mark.parametrize("command, flags", [
    (lr_find_command, ("--min_lr", "--max_lr", "--num_steps", "--smooth", "--diverge")),
    (batch_find_command, ("--first_size", "--max_memory", "--steps", "--max_trials")),
])
def test_help_lists_the_tools_flags_beside_the_tasks(command, flags):
    text = command.get_parser("basetrainer tool").format_help()
    assert all(flag in text for flag in (*flags, "--train_data", "--net_type", "--batch_size", "KEY=VALUE"))


def test_tool_flags_are_not_config_keys(tmp_path, monkeypatch, capsys):
    error = refused(["lr-find", "num_steps=5"], tmp_path, monkeypatch, capsys)
    assert error.startswith("error: unknown config key 'num_steps'")
