"""Every ``basetrainer`` command that takes ``--task`` shows, in ``--help``, the flags it accepts for the task named,
``--task`` among them: each flag the help lists is fed back to what the command parses, and none is refused."""
import importlib
import re

import pytest

from basetrainer import cli
from basetrainer.errors import BaseTrainerError
from basetrainer.tasks import TASKS

COMMANDS_WITH_TASKS = [("train", task) for task in TASKS] + [
    (tool, task) for tool in cli.TASK_TOOLS for task in ("classification", "text")] + [
    ("predict", task) for task in cli.PREDICT_TASKS]
PREDICT_REQUIRED = {"classification": ["--checkpoint", "m.pth", "--data", "d", "--out", "p.csv"],
                    "detection": ["--checkpoint", "m.pth", "--images", "d", "--annotations", "a.json",
                                  "--out", "r.json"]}
FLAG = re.compile(r"^\s{2}(-[-\w]+)", re.MULTILINE)  # the first option string of each line of the options list


def help_text(command, task, capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        cli.main([command, "--task", task, "--help"])
    assert stop.value.code == 0
    return capsys.readouterr().out


def listed_flags(text: str) -> list:
    """Every option string the help lists: the first of each line, and those after it (``-c, --config_file``)."""
    flags = []
    for line in text.split("\n\n", 1)[1].splitlines():  # after the usage block
        if FLAG.match(line):
            flags += re.findall(r"(?:^|, )(-[-\w]+)", line.strip().split("  ")[0])
    return [flag for flag in dict.fromkeys(flags) if flag not in ("-h", "--help")]


def a_value_for(flag: str, parser) -> list:
    """Words that follow ``flag`` on a command line: none for a switch, a choice, the default, or a number."""
    action = next(action for action in parser._actions if flag in action.option_strings)
    if action.nargs == 0:
        return []
    if action.choices:
        return [str(next(iter(action.choices)))]
    default = action.default
    if isinstance(default, (list, tuple)):
        return [str(item) for item in default] or ["1"]
    if default is not None and not isinstance(default, bool):
        return [str(default)]
    return ["1"]


def parse_as_the_command_does(command, task, argv):
    """What the command reads from its arguments before any work (it starts nothing)."""
    if command == "train":
        _, rest = cli.train_task(["--task", task, *argv])
        _, _, rest = cli.ray_arguments(rest)
        return importlib.import_module(TASKS[task]).parse_config(rest, f"basetrainer train --task {task}")
    if command in cli.TASK_TOOLS:
        tool = importlib.import_module(cli.TOOL_MODULES[command]).COMMAND
        return tool.parse(["--task", task, *argv], f"basetrainer {command}")
    if task == "detection":
        from basetrainer.tasks.detection.predict import get_parser

        return get_parser("basetrainer predict --task detection").parse_args([*PREDICT_REQUIRED[task], *argv])
    return cli.get_parser().parse_args(["predict", *PREDICT_REQUIRED[task], *argv])


def help_parser(command, task):
    if command == "train":
        return cli.train_parser(task)
    if command in cli.TASK_TOOLS:
        return cli.tool_parser(command, task)
    return cli.command_parsers()["basetrainer predict" + (" --task detection" if task == "detection" else "")]


@pytest.mark.parametrize("command, task", COMMANDS_WITH_TASKS)
def test_every_flag_the_help_lists_for_a_task_is_accepted_by_that_command_for_that_task(
        command, task, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    flags = listed_flags(help_text(command, task, capsys))
    assert "--task" in flags
    parser = help_parser(command, task)
    refused = []
    for flag in flags:
        argv = [flag, *a_value_for(flag, parser)] if flag != "--task" else []  # the --task before them
        try:
            parse_as_the_command_does(command, task, argv)
        except BaseTrainerError:
            pass  # a value checked against the other keys: the flag itself was read
        except SystemExit as stop:
            error = capsys.readouterr().err
            if stop.code and ("unrecognized arguments" in error or "ambiguous option" in error):
                refused.append(f"{' '.join(argv)}: {error.strip()}")
    assert refused == [], f"basetrainer {command} --task {task} --help lists flags it refuses"


@pytest.mark.parametrize("tool", cli.TASK_TOOLS)
def test_a_tools_help_for_the_text_task_lists_the_text_tasks_flags_not_the_classifiers(tool, capsys):
    flags = set(listed_flags(help_text(tool, "text", capsys)))
    assert {"--model", "--task_type", "--max_seq_len"} <= flags
    assert not {"--net_type", "--input_size", "--use_prune"} & flags


def test_the_command_reference_has_a_section_for_each_tool_and_task_it_takes():
    parsers = cli.command_parsers()
    assert {"basetrainer lr-find --task text", "basetrainer batch-find --task text",
            "basetrainer train --task text", "basetrainer predict --task detection"} <= set(parsers)
