"""The README's snippets, read out of README.md itself: the Python script runs, and every command line parses."""
import pathlib
import re
import shlex

import pytest

from basetrainer import cli
from basetrainer.tasks.classification import parse_config
from support.processes import run_python

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def blocks(language):
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def command_lines():
    """Every shell command of the README, continuation lines joined and comments dropped."""
    for block in blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#", 1)[0].strip()
            for command in filter(None, (part.strip() for part in line.split("&&"))):
                yield command


def example_commands():
    """The argument lists given to examples/example.py (also under torchrun) and to `basetrainer train`."""
    for command in command_lines():
        words = shlex.split(command)
        for start, word in enumerate(words):
            if word.endswith("examples/example.py"):
                yield command, words[start + 1:]
                break
            if word == "basetrainer" and words[start + 1: start + 2] == ["train"]:
                yield command, words[start + 2:]
                break


def test_the_readme_shows_commands_of_the_example():
    assert len(list(example_commands())) >= 10


@pytest.mark.parametrize("command, argv", list(example_commands()), ids=lambda x: x if isinstance(x, str) else "")
def test_every_example_command_in_the_readme_parses(command, argv):
    parse_config(argv)  # no exception: every flag and key=value exists and has the right type


@pytest.mark.parametrize("command", [c for c in command_lines() if re.match(r"basetrainer (export|predict)\b", c)])
def test_every_basetrainer_export_and_predict_command_in_the_readme_parses(command):
    cli.get_parser().parse_args(shlex.split(command)[1:])


def own_task_script():
    [script] = [block for block in blocks("python") if "class MyTrainer(EngineTrainer)" in block]
    return script


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["--distributed", "--gpu_id", "0", "1"]], ids=["one process", "distributed"])
def test_the_own_task_script_of_the_readme_runs(tmp_path, extra):
    script = tmp_path / "my_task.py"
    script.write_text(own_task_script())
    result = run_python([script, "--num_epochs", "1", "--work_dir", tmp_path / "work", *extra], cwd=tmp_path,
                        env={"CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "work" / "model" / "last.pth").is_file()
