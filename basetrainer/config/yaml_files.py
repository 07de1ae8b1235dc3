"""Reading and writing a ``Config`` as YAML; every failure is a one-line ConfigError."""
import argparse
import os
import re
from collections.abc import Mapping

import yaml

from basetrainer.errors import ConfigError
from basetrainer.utils.file_utils import write_text_atomic

from .mapping import Config, to_plain


class _YamlLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that also reads ``1e-3`` as a float.

    YAML 1.1 wants a dot and a signed exponent (``1.0e-3``), so learning rates written the
    usual way would silently become strings.
    """


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def parse_yaml(text):
    """The value YAML reads from ``text`` (``1e-3`` is a float); raises yaml.YAMLError."""
    return yaml.load(text, Loader=_YamlLoader)


def load_config(path):
    """Read a YAML mapping into a ``Config``; any problem is a one-line ConfigError."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as stream:
            data = parse_yaml(stream)
    except OSError as error:
        raise _file_error(path, error, "cannot read config file {path}: {reason}; check its permissions") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text; save it as UTF-8 YAML") from None
    except yaml.YAMLError as error:
        raise ConfigError(_yaml_error_line(path, error)) from None
    if data is None:  # an empty file
        return Config()
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"config file {path} holds a {type(data).__name__} at the top level; write it as 'key: value' lines"
        )
    return Config(data)


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


def _yaml_error_line(path, error):
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    problem = " ".join(problem.split())
    where = f"{path} line {mark.line + 1}" if mark is not None else path
    return f"{where}: {problem}; fix the YAML syntax"
