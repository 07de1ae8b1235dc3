"""YAML read strictly: plain data, one document, and nothing that PyYAML accepts but the writer did not mean.

PyYAML implements YAML 1.1, which reads some plain words and numbers otherwise than YAML
1.2, editors and people do: ``yes``/``no``/``on``/``off`` are booleans, ``010`` is the octal
8, ``1:30`` is 90, ``2024-01-01`` a date, ``1_000`` a thousand. It also takes a key twice
(the last one wins), keys that are not text, aliases, and ``key:value`` without a space as
one string. :func:`read_yaml` refuses all of these, each with the line it is on
(:class:`YamlProblem`); a plain scalar is accepted only where YAML 1.1 and 1.2 agree on it,
so a file means the same to every reader. ``1e-3`` is a float, as in YAML 1.2.
"""
import math
import re

import yaml

MAX_DEPTH = 50  # levels of nested lists and mappings; a config needs a handful
_TAG = "tag:yaml.org,2002:"
PLAIN_TAGS = {_TAG + name for name in ("str", "int", "float", "bool", "null", "seq", "map")}

_CORE_INT = re.compile(r"[-+]?[0-9]+")
_CORE_OCTAL = re.compile(r"0o[0-7]+")
_CORE_HEX = re.compile(r"0x[0-9a-fA-F]+")
_CORE_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_CORE_INF = re.compile(r"[-+]?\.(inf|Inf|INF)")
_CORE_NAN = re.compile(r"\.(nan|NaN|NAN)")
_CORE_WORDS = {"": None, "~": None, "null": None, "Null": None, "NULL": None,
               "true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_KEY_WITHOUT_SPACE = re.compile(r"([A-Za-z_][\w.-]*):(\S.*)")
_OCTAL_1_1 = re.compile(r"[-+]?0[0-7_]+")


class YamlProblem(Exception):
    """A structural mistake in a YAML text, at ``line`` (1-based; None where the text has no lines to point at)."""

    def __init__(self, problem: str, mark=None):
        super().__init__(problem)
        self.problem = problem
        self.line = mark.line + 1 if mark is not None else None


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that reads ``1e-3`` as a float, as YAML 1.2 does (YAML 1.1 wants ``1.0e-3``, so
    learning rates written the usual way would silently be strings), and refuses aliases."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise YamlProblem("aliases (*name) are not supported; write the value out", self.peek_event().start_mark)
        return super().compose_node(parent, index)


_Loader.add_implicit_resolver(
    _TAG + "float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def read_yaml(text):
    """``(data, lines)``: the plain data of the YAML ``text`` (a str or a stream), and the line of each
    mapping key (dotted for nested ones: ``{"optim.lr": 4}``). Raises YamlProblem for a structural
    mistake, yaml.YAMLError for a syntax error, RecursionError for absurd nesting."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}
        lines = {}
        _check(node, loader, "", 0, lines)
        return loader.construct_document(node), lines
    finally:
        loader.dispose()


def _check(node, loader, prefix, depth, lines):
    if depth > MAX_DEPTH:
        raise YamlProblem(f"nested more than {MAX_DEPTH} levels deep; a config is a few levels of plain data",
                          node.start_mark)
    if isinstance(node, yaml.ScalarNode):
        _check_scalar(node, loader)
        return
    if node.tag not in PLAIN_TAGS:
        raise YamlProblem(f"the tag {_short(node.tag)} is not plain data; remove it", node.start_mark)
    if isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _check(item, loader, f"{prefix}[{index}].", depth + 1, lines)
        return
    seen = {}
    for key_node, value_node in node.value:
        key = _check_key(key_node, loader, seen)
        seen[key] = lines[prefix + key] = key_node.start_mark.line + 1
        _check(value_node, loader, f"{prefix}{key}.", depth + 1, lines)


def _check_key(node, loader, seen):
    if node.tag == _TAG + "merge":
        raise YamlProblem("merge keys ('<<') are not supported; write the keys out", node.start_mark)
    if not isinstance(node, yaml.ScalarNode):
        raise YamlProblem("a key must be text, not a list or a mapping", node.start_mark)
    key = _check_scalar(node, loader)
    if not isinstance(key, str):
        raise YamlProblem(f"the key {node.value!r} is read as {_describe(key)}; keys must be text: quote it "
                          f"('{node.value}':)", node.start_mark)
    if key in seen:
        raise YamlProblem(f"the key {key!r} is given twice (first on line {seen[key]}); keep one",
                          node.start_mark)
    return key


def _check_scalar(node, loader):
    """The scalar's value, after checking that it is plain data and that YAML 1.1 and 1.2 read it alike."""
    implicit = node.style is None and node.tag == loader.resolve(yaml.ScalarNode, node.value, (True, False))
    if implicit:
        yaml_1_2 = _yaml_1_2_value(node.value)
        yaml_1_1 = loader.construct_object(node) if node.tag in PLAIN_TAGS else _Unreadable
        if not _same(yaml_1_1, yaml_1_2):
            raise YamlProblem(_ambiguity(node.value, yaml_1_1, yaml_1_2), node.start_mark)
        _check_space_after_colon(node)
        return yaml_1_1
    if node.tag not in PLAIN_TAGS:
        raise YamlProblem(f"the tag {_short(node.tag)} is not plain data; remove it", node.start_mark)
    return loader.construct_object(node)


def _check_space_after_colon(node):
    match = _KEY_WITHOUT_SPACE.fullmatch(node.value)
    if match and (not isinstance(_yaml_1_2_value(match.group(2)), str) or match.group(2)[0] in "[{"):
        key, value = match.groups()
        raise YamlProblem(f"{node.value!r} is one text, not a key and its value: YAML needs a space after ':'; "
                          f"write '{key}: {value}' (or quote the text)", node.start_mark)


class _Unreadable:
    """What YAML 1.1 makes of a plain scalar that is no plain data (a date, '=')."""


def _yaml_1_2_value(text):
    """What YAML 1.2's core schema makes of the plain scalar ``text``."""
    if text in _CORE_WORDS:
        return _CORE_WORDS[text]
    if _CORE_INT.fullmatch(text):
        return int(text)
    if _CORE_OCTAL.fullmatch(text) or _CORE_HEX.fullmatch(text):
        return int(text, 0)
    if _CORE_FLOAT.fullmatch(text):
        return float(text)
    if _CORE_INF.fullmatch(text):
        return -math.inf if text.startswith("-") else math.inf
    if _CORE_NAN.fullmatch(text):
        return math.nan
    return text


def _same(a, b):
    if type(a) is not type(b):
        return False
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


def _ambiguity(text, yaml_1_1, yaml_1_2):
    """Why the plain scalar ``text`` is refused, and what to write instead."""
    if isinstance(yaml_1_1, bool):
        return (f"{text!r} is read as {str(yaml_1_1).lower()} (YAML 1.1 reads yes, no, on and off as booleans); "
                f"write true or false, or quote '{text}' for the text")
    if isinstance(yaml_1_1, (int, float)) and ":" in text:
        return f"{text!r} is read as the number {yaml_1_1} (YAML 1.1 reads 1:30 as 90); quote it ('{text}') for the text"
    if isinstance(yaml_1_1, int) and _OCTAL_1_1.fullmatch(text):
        return (f"{text!r} is read as the octal number {yaml_1_1} (YAML 1.1); write the number without the "
                f"leading zero, or quote it ('{text}') for the text")
    if yaml_1_1 is _Unreadable:
        return f"{text!r} is not plain data to YAML 1.1 (a date, a time or a special value); quote it ('{text}')"
    number = yaml_1_2 if isinstance(yaml_1_1, str) else yaml_1_1
    return (f"{text!r} is read as {_describe(yaml_1_1)} by PyYAML (YAML 1.1) but as {_describe(yaml_1_2)} by "
            f"YAML 1.2; write {_plain(number)} for the number, or quote it ('{text}') for the text")


def _describe(value):
    return "null" if value is None else f"the {type(value).__name__} {value!r}"


def _plain(value):
    return str(value).lower() if isinstance(value, bool) else repr(value)


def _short(tag):
    return "!!" + tag[len(_TAG):] if tag.startswith(_TAG) else tag
