"""Strict checking: every key known, every value of its default's type."""
import difflib
from collections.abc import Mapping

from basetrainer.errors import ConfigError

from .mapping import deep_merge


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


def reference_defaults(defaults, known):
    """What strict checking compares with: ``defaults`` plus the ``known`` keys of parser_config."""
    return deep_merge(defaults, known or {})


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
