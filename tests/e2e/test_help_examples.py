"""Every example that ``--help`` of the classification pipeline shows works as written.

The examples are read from ``get_parser().format_help()``, never retyped here: the command
lines under ``examples:`` and every lower-case ``key=value`` anywhere in the text
(placeholders are written in capitals, ``KEY=VALUE``).
"""
import re
import shlex
from pathlib import Path

import pytest

from basetrainer.config import Config, apply_overrides
from basetrainer.tasks import classification

PROG = "example.py"
REPO = Path(__file__).resolve().parents[2]  # the examples name configs/config.yaml relative to it


def help_text():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", "1000")  # so that argparse wraps no line, and no example is cut in two
        return classification.get_parser(PROG).format_help()


def example_commands(text):
    """The arguments of each command line under ``examples:``, without its ``# comment``."""
    block = text.partition("\nexamples:\n")[2]
    return [shlex.split(line, comments=True)[1:] for line in block.splitlines() if line.split()[:1] == [PROG]]


def key_value_examples(text):
    return sorted({token.rstrip(".,;:)") for token in re.findall(r"(?<![\w.-])[a-z_][\w.]*=\S*", text)})


COMMANDS = example_commands(help_text())
KEY_VALUES = key_value_examples(help_text())


def assert_parses_with_its_overrides_applied(argv, monkeypatch):
    monkeypatch.chdir(REPO)
    cfg = classification.parse_config(argv)
    overrides = [arg for arg in argv if re.match(r"[a-z_][\w.]*=", arg)]
    expected = apply_overrides(Config(), overrides)
    assert {key: cfg[key] for key in expected} == expected


def test_help_shows_example_commands_and_key_value_settings():
    assert len(COMMANDS) >= 3 and all(COMMANDS)
    assert len(KEY_VALUES) >= 3


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_every_example_command_in_help_parses(argv, monkeypatch):
    assert_parses_with_its_overrides_applied(argv, monkeypatch)


@pytest.mark.parametrize("setting", KEY_VALUES)
def test_every_key_value_in_help_parses(setting, monkeypatch):
    assert_parses_with_its_overrides_applied([setting], monkeypatch)

