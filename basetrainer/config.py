"""Configuration: the command line, a YAML file and the parser's defaults merged into one ``Config``.

Precedence, highest first::

    --opts key=value / bare key=value    (any key, nested with dots: optim.lr=0.1)
    flags typed on the command line       (--lr 0.1, -c x.yaml)
    the YAML file named by -c/--config_file
    the parser's defaults

Keys that only the YAML file has are kept as they are. Checking keys and types is opt-in
(``strict=True``): scripts of the old library rely on every YAML key passing through.
"""
import argparse
import copy
import difflib
import numbers
import os
import re
import sys
from collections.abc import Mapping

import yaml

from basetrainer.errors import ConfigError
from basetrainer.utils.file_utils import write_text_atomic

__all__ = [
    "Config",
    "parser_config",
    "load_config",
    "save_config",
    "apply_overrides",
    "check_config",
    "add_override_arguments",
    "to_plain",
]


class Config(dict):
    """A dict whose keys are also attributes: ``cfg.lr`` is ``cfg["lr"]``.

    Nested dicts, also those inside lists, become ``Config`` when stored. A missing
    attribute raises AttributeError, so ``getattr(cfg, "key", default)`` works. Keys named
    like dict methods (``items``, ``copy``...) are reached with ``cfg["items"]``.
    """

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.update(*args, **kwargs)

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"config has no key {name!r}") from None

    def __setattr__(self, name, value):
        self[name] = value

    def __delattr__(self, name):
        try:
            del self[name]
        except KeyError:
            raise AttributeError(f"config has no key {name!r}") from None

    def __setitem__(self, key, value):
        super().__setitem__(key, _wrap(value))

    # dict's own update/setdefault bypass __setitem__, so nested dicts would stay plain.
    def update(self, *args, **kwargs):
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def copy(self):
        return Config(self)

    def to_dict(self):
        """Plain nested dicts and lists, safe for YAML, JSON and checkpoints (other values become str)."""
        return to_plain(self)


def _wrap(value):
    if isinstance(value, Config):
        return value
    if isinstance(value, Mapping):
        return Config(value)
    if type(value) in (list, tuple):
        return type(value)(_wrap(item) for item in value)
    return value


def to_plain(value):
    """``value`` as nested dicts and lists of str, int, float, bool and None; other objects become str."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):  # also numpy integers, which YAML cannot write
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, Mapping):
        return {key if isinstance(key, (str, int)) else str(key): to_plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(item) for item in value]
    if isinstance(value, argparse.Namespace):
        return to_plain(vars(value))
    return str(value)


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


def load_config(path):
    """Read a YAML mapping into a ``Config``; any problem is a one-line ConfigError."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as stream:
            data = yaml.load(stream, Loader=_YamlLoader)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}; check the path given to -c/--config_file") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory; give the path of a .yaml file") from None
    except OSError as error:
        raise ConfigError(f"cannot read config file {path}: {error.strerror}; check its permissions") from None
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


def _yaml_error_line(path, error):
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    problem = " ".join(problem.split())
    where = f"{path} line {mark.line + 1}" if mark is not None else path
    return f"{where}: {problem}; fix the YAML syntax"


def save_config(cfg, path):
    """Write ``cfg`` (a dict, Config or argparse.Namespace) as plain YAML, atomically; returns ``path``."""
    if isinstance(cfg, argparse.Namespace):
        cfg = vars(cfg)
    text = yaml.safe_dump(to_plain(cfg), sort_keys=False, allow_unicode=True, default_flow_style=False)
    try:
        write_text_atomic(path, text)
    except OSError as error:
        raise ConfigError(f"cannot write config to {path}: {error.strerror}; choose a writable work_dir") from None
    return path


def apply_overrides(cfg, overrides):
    """Set ``key=value`` strings on ``cfg`` in place and return it.

    Values are read as YAML (``lr=0.1`` is a float, ``milestones=[3,6]`` a list,
    ``amp=bf16`` a string, ``resume=`` None); dots reach nested keys (``optim.lr=0.1``).
    """
    for key, value in map(_parse_override, overrides):
        _set_dotted(cfg, key, value)
    return cfg


def _parse_override(text):
    key, sep, raw = str(text).partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"cannot read override {text!r}; write it as key=value, e.g. lr=0.01 or optim.lr=0.01")
    try:
        value = yaml.load(raw, Loader=_YamlLoader)
    except yaml.YAMLError:
        value = raw  # not YAML (e.g. an unbalanced bracket in a path): take it as written
    return key, value


def _set_dotted(cfg, key, value):
    *parents, leaf = key.split(".")
    node = cfg
    for depth, name in enumerate(parents):
        child = node.setdefault(name, Config())
        if not isinstance(child, Mapping):
            prefix = ".".join(parents[: depth + 1])
            raise ConfigError(
                f"cannot set '{key}': '{prefix}' is a {type(child).__name__}, not a mapping; set '{prefix}' itself"
            )
        node = child
    node[leaf] = value


def _nested(key, value):
    """``"a.b", 1`` -> ``{"a": {"b": 1}}``."""
    for name in reversed(key.split(".")):
        value = {name: value}
    return value


def check_config(cfg, defaults, allow_extra=(), source=None):
    """Raise ConfigError for the first key of ``cfg`` not in ``defaults``, or of another type.

    The type expected is that of the default: int takes int (not bool), float takes int
    or float, bool only bool, str only str, a list a list or tuple (each item like the
    default's items when those share one type); a default of None, or an empty dict,
    takes anything; a non-empty dict is checked key by key. ``allow_extra`` names keys
    (dotted for nested ones) let through unchecked. ``source`` (e.g. ``"in x.yaml"``) is
    quoted in the message.
    """
    where = f" ({source})" if source else ""
    _check_mapping(cfg, defaults, "", set(allow_extra), where)


def _check_mapping(values, defaults, prefix, allow_extra, where):
    for key, value in values.items():
        name = f"{prefix}{key}"
        if name in allow_extra:
            continue
        if key not in defaults:
            close = difflib.get_close_matches(str(key), [str(k) for k in defaults], n=1)
            hint = f": did you mean '{prefix}{close[0]}'?" if close else "; check its spelling or remove it"
            raise ConfigError(f"unknown config key '{name}'{where}{hint}")
        _check_value(value, defaults[key], name, allow_extra, where)


def _check_value(value, default, name, allow_extra, where):
    if default is None or (isinstance(default, Mapping) and not default):
        return
    if isinstance(default, Mapping):
        if not isinstance(value, Mapping):
            _wrong_type(name, "a mapping", value, where)
        _check_mapping(value, default, f"{name}.", allow_extra, where)
    elif isinstance(default, (list, tuple)):
        if not isinstance(value, (list, tuple)):
            _wrong_type(name, "a list", value, where)
        item_types = {type(item) for item in default}
        if len(item_types) == 1:
            for index, item in enumerate(value):
                _check_value(item, default[0], f"{name}[{index}]", allow_extra, where)
    elif isinstance(default, bool):
        if not isinstance(value, bool):
            _wrong_type(name, "bool", value, where)
    elif isinstance(default, int):
        if not isinstance(value, int) or isinstance(value, bool):
            _wrong_type(name, "int", value, where)
    elif isinstance(default, float):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            _wrong_type(name, "float", value, where)
    elif isinstance(default, str):
        if not isinstance(value, str):
            _wrong_type(name, "str", value, where)


def _wrong_type(name, expected, value, where):
    got = "None" if value is None else f"{type(value).__name__} {value!r}"
    raise ConfigError(f"config key '{name}' expects {expected}, got {got}{where}")


def add_override_arguments(parser):
    """Let ``parser`` take any config key: ``key=value ...`` at the end, or ``--opts key=value ...``.

    They land in ``args.opts`` and ``args.overrides``, which ``parser_config`` applies last.
    Returns ``parser``.
    """
    help_text = "set any config key, e.g. lr=0.01 optim.momentum=0.9 milestones=[30,60]"
    parser.add_argument("--opts", nargs="*", action="extend", default=[], metavar="KEY=VALUE", help=help_text)
    parser.add_argument("overrides", nargs="*", default=[], metavar="KEY=VALUE", help=help_text)
    return parser


_OVERRIDE_DESTS = ("opts", "overrides")


def parser_config(args, cfg_updata=True, *, parser=None, strict=False, known=None, argv=None):
    """Merge ``args`` (an argparse.Namespace) with the YAML file ``args.config_file`` into a ``Config``.

    A flag typed on the command line keeps its value; otherwise the YAML value wins;
    otherwise the parser's default. Keys only the YAML has are kept. ``args.opts``
    (``key=value`` strings) are applied last. ``cfg.config_file`` is the file read, or None.

    cfg_updata: kept for old scripts. It used to let the YAML beat typed flags; typed flags
        now always win, whatever its value.
    parser: the ArgumentParser that made ``args``. With it, the flags typed are known
        exactly (short flags, abbreviations, ``--x=1``); without it, ``--name`` tokens of
        ``argv`` are taken as typed.
    strict: check the YAML's and the overrides' keys against the parser's dests (plus
        ``known``) and their values against the defaults' types; see ``check_config``.
    known: keys beyond the parser's dests, with defaults whose types are checked:
        nested dicts for nested keys, None for a key of any type.
    argv: the strings ``args`` was parsed from, if not ``sys.argv[1:]``.
    """
    values = dict(vars(args))
    argv = sys.argv[1:] if argv is None else list(argv)
    defaults = _parser_defaults(parser) if parser is not None else None
    typed = _typed_dests(values, parser, defaults, argv)

    config_file = values.get("config_file")
    file_cfg = load_config(config_file) if config_file else Config()
    reference = _reference(defaults or values, known) if strict else None
    if strict:
        check_config(file_cfg, reference, source=f"in {config_file}")

    cfg = Config()
    for key, value in values.items():
        cfg[key] = file_cfg[key] if key in file_cfg and key not in typed else value
    for key, value in file_cfg.items():
        cfg.setdefault(key, value)
    cfg.config_file = config_file

    overrides = []
    for dest in _OVERRIDE_DESTS:
        if dest in values:
            cfg.pop(dest)
            given = values[dest] or []
            overrides += [given] if isinstance(given, str) else list(given)
    if overrides:
        for key, value in map(_parse_override, overrides):
            if strict:
                check_config(_nested(key, value), reference, source="from --opts")
            _set_dotted(cfg, key, value)
    return cfg


def _reference(defaults, known):
    reference = copy.deepcopy(dict(defaults))
    _merge_into(reference, known or {})
    return reference


def _merge_into(target, extra):
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), Mapping):
            target[key] = dict(target[key])
            _merge_into(target[key], value)
        else:
            target[key] = value


def _typed_dests(values, parser, defaults, argv):
    """The dests the user set: typed in ``argv``, or (with a parser) differing from the default."""
    if parser is None:
        return _scan_long_flags(values, argv)
    try:
        seen, _ = _quiet_copy(parser, suppress_defaults=True).parse_known_args(argv)
        typed = set(vars(seen))
    except (_ProbeError, argparse.ArgumentError, SystemExit):
        typed = _scan_long_flags(values, argv)
    # args parsed from another list than argv (a notebook, main(argv), a test) still wins.
    typed |= {dest for dest, default in defaults.items() if dest in values and values[dest] != default}
    return typed


def _scan_long_flags(values, argv):
    typed = set()
    for token in argv:
        if token == "--":
            break
        if not token.startswith("--"):
            continue
        name = token[2:].split("=", 1)[0].replace("-", "_")
        matches = [name] if name in values else [dest for dest in values if dest.startswith(name)]
        if len(matches) == 1:  # argparse accepts unambiguous prefixes
            typed.add(matches[0])
    return typed


def _parser_defaults(parser):
    """The namespace ``parser.parse_args([])`` would give, even if some arguments are required."""
    try:
        namespace, _ = _quiet_copy(parser, suppress_defaults=False).parse_known_args([])
    except (_ProbeError, argparse.ArgumentError, SystemExit):
        return {}
    return vars(namespace)


class _ProbeError(Exception):
    pass


def _raise_probe_error(message):
    raise _ProbeError(message)


def _quiet_copy(parser, suppress_defaults):
    """A copy of ``parser`` that neither exits nor requires anything; optionally with no defaults."""
    try:
        clone = copy.deepcopy(parser)
    except (TypeError, copy.Error) as error:  # e.g. a `type=` callable holding a lock
        raise _ProbeError(str(error)) from None
    _make_quiet(clone, suppress_defaults)
    return clone


def _make_quiet(parser, suppress_defaults):
    parser.error = _raise_probe_error
    if suppress_defaults:
        parser._defaults = {}
    for action in parser._actions:
        action.required = False
        if suppress_defaults:
            action.default = argparse.SUPPRESS
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                _make_quiet(subparser, suppress_defaults)
