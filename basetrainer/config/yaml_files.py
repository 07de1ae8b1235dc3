"""Reading and writing a ``Config`` as YAML, read strictly (:mod:`.strict_yaml`); every failure is a one-line
ConfigError naming the file and, where there is one, the line."""
import argparse
import os
from collections.abc import Mapping

import yaml

from basetrainer.errors import ConfigError
from basetrainer.utils.file_utils import write_text_atomic

from .mapping import Config, to_plain
from .strict_yaml import MAX_DEPTH, YamlProblem, read_yaml


def parse_yaml(text):
    """The plain data of the YAML ``text``, read strictly (see :mod:`.strict_yaml`: ``1e-3`` is a float,
    ``yes`` an error). Raises YamlProblem for a structural mistake, yaml.YAMLError for a syntax error."""
    try:
        return read_yaml(text)[0]
    except RecursionError:
        raise YamlProblem(f"nested more than {MAX_DEPTH} levels deep; a config is a few levels of plain data") from None


def load_config(path):
    """Read a YAML mapping into a ``Config``; any problem is a one-line ConfigError naming the file and line."""
    return read_config(path)[0]


def read_config(path):
    """``(cfg, lines)``: :func:`load_config`'s ``Config`` and the line of each key in the file (dotted for nested keys)."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as stream:
            data, lines = read_yaml(stream)
    except OSError as error:
        raise _file_error(path, error, "cannot read config file {path}: {reason}; check its permissions") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text; save it as UTF-8 YAML") from None
    except YamlProblem as error:
        where = f"{path} line {error.line}" if error.line else path
        raise ConfigError(f"{where}: {error.problem}") from None
    except yaml.YAMLError as error:
        raise ConfigError(_yaml_error_line(path, error)) from None
    except RecursionError:
        raise ConfigError(f"{path}: nested more than {MAX_DEPTH} levels deep; a config is a few levels of plain data")
    if data is None:  # an empty file
        return Config(), {}
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"config file {path} holds a {type(data).__name__} at the top level; write it as 'key: value' lines"
        )
    return Config(data), lines


def save_config(cfg, path):
    """Write ``cfg`` (a dict, Config or argparse.Namespace) as plain YAML, atomically; returns ``path``."""
    if isinstance(cfg, argparse.Namespace):
        cfg = vars(cfg)
    text = yaml.safe_dump(to_plain(cfg), sort_keys=False, allow_unicode=True, default_flow_style=False)
    try:
        write_text_atomic(path, text)
    except OSError as error:
        raise _file_error(path, error, "cannot write config to {path}: {reason}; choose a writable work_dir") from None
    return path


# What to tell the user when the path itself is wrong, whether reading or writing.
_PATH_PROBLEMS = {
    FileNotFoundError: "config file not found: {path}; check the path given to -c/--config_file",
    IsADirectoryError: "config file {path} is a directory; give the path of a .yaml file",
}


def _file_error(path, error, otherwise):
    """The one-line ConfigError for ``error`` (an OSError) on ``path``; ``otherwise`` is the template
    for problems other than a missing file or a directory."""
    template = next((text for kind, text in _PATH_PROBLEMS.items() if isinstance(error, kind)), otherwise)
    return ConfigError(template.format(path=path, reason=error.strerror))


# PyYAML's words for a syntax error -> (which mark points at the mistake, what to do).
_SYNTAX_HINTS = {
    "found character '\\t' that cannot start any token": ("problem_mark", "indent and separate with spaces, not tabs"),
    "could not find expected ':'": ("context_mark", "write each setting as 'key: value', with a space after ':'"),
    "but found another document": ("problem_mark", "a config file holds one document: remove the second '---'"),
}


def _yaml_error_line(path, error):
    problem = " ".join((getattr(error, "problem", None) or str(error)).split())
    context = " ".join((getattr(error, "context", None) or "").split())
    mark_name, hint = next(((mark, hint) for words, (mark, hint) in _SYNTAX_HINTS.items()
                            if words in f"{context} {problem}"), ("problem_mark", "fix the YAML syntax"))
    mark = getattr(error, mark_name, None) or getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    where = f"{path} line {mark.line + 1}" if mark is not None else path
    return f"{where}: {problem}; {hint}"
