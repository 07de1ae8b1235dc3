"""What a config value may be: the kinds a :class:`~basetrainer.config.schema.Setting` declares.

Each kind checks a value (``check`` returns it in canonical form or raises
:class:`Invalid`), says in words what it accepts (``describe``: "an integer >= 1"), and
tells argparse how to read it from a flag (``flag_type``). Values are plain data as YAML
or a command line gives them: a bool is never a number, NaN and infinities are never
numbers, a float is never an integer.
"""
import math
import numbers
import re
from typing import Callable, Optional

from basetrainer.errors import BaseTrainerError

INT64_MAX = 2 ** 63 - 1  # what torch and numpy can hold; a larger integer is a typo


class Invalid(ValueError):
    """``value`` is not of this kind; ``detail`` (optional) says more than ``describe`` does."""

    def __init__(self, detail: str = ""):
        super().__init__(detail)
        self.detail = detail


class Kind:
    """A kind of value. Subclasses implement ``check`` and ``describe``."""

    flag_type: Callable = str  # argparse's ``type=`` for a flag of this kind

    def check(self, value):
        raise NotImplementedError

    def describe(self, plural: bool = False) -> str:
        raise NotImplementedError


class Integer(Kind):
    """An int (not a bool) in ``[minimum, maximum]``."""

    flag_type = int

    def __init__(self, minimum: Optional[int] = None, maximum: Optional[int] = None):
        self.minimum, self.maximum = minimum, maximum

    def check(self, value):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise Invalid()
        if abs(int(value)) > INT64_MAX:
            raise Invalid("it does not fit in 64 bits")
        if not _within(value, self.minimum, self.maximum):
            raise Invalid()
        return int(value)

    def describe(self, plural=False):
        return ("integers" if plural else "an integer") + _bounds(self.minimum, self.maximum)


class Number(Kind):
    """A finite int or float (not a bool) in ``[minimum, maximum]``; ``above`` and ``below`` make the bounds
    exclusive."""

    flag_type = float

    def __init__(self, minimum: Optional[float] = None, maximum: Optional[float] = None, above: bool = False,
                 below: bool = False):
        self.minimum, self.maximum, self.above, self.below = minimum, maximum, above, below

    def check(self, value):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise Invalid()
        if isinstance(value, numbers.Integral) and abs(int(value)) > INT64_MAX:
            raise Invalid("it does not fit in 64 bits")
        if not math.isfinite(value):
            raise Invalid("NaN and infinities are not allowed")
        if not _within(value, self.minimum, self.maximum, self.above, self.below):
            raise Invalid()
        return value

    def describe(self, plural=False):
        return ("numbers" if plural else "a number") + _bounds(self.minimum, self.maximum, self.above, self.below)


class Boolean(Kind):
    """``true`` or ``false`` (YAML), True or False (Python); never 0, 1 or "yes"."""

    def check(self, value):
        if not isinstance(value, bool):
            raise Invalid()
        return value

    def describe(self, plural=False):
        return "true or false"


class Text(Kind):
    """A str; ``non_empty`` refuses ""; ``pattern`` (a regular expression the whole text must match) narrows
    it. ``meaning`` says in words what the text is ("a path"; ``plural``: "paths")."""

    def __init__(self, non_empty: bool = False, pattern: Optional[str] = None, meaning: str = "", plural: str = ""):
        self.non_empty, self.pattern, self.meaning, self.plural = non_empty, pattern, meaning, plural

    def check(self, value):
        if not isinstance(value, str) or (self.non_empty and not value.strip()):
            raise Invalid()
        if "\x00" in value:
            raise Invalid("it holds a NUL character")
        if self.pattern and not re.fullmatch(self.pattern, value):
            raise Invalid()
        return value

    def describe(self, plural=False):
        if self.meaning:
            return self.plural or self.meaning if plural else self.meaning
        return ("non-empty texts" if plural else "a non-empty text") if self.non_empty else ("texts" if plural else "a text")


class Choice(Kind):
    """One of ``choices``: texts compared without regard to case or surrounding spaces (and returned as
    declared), or True, False and None, compared by identity. ``aliases`` map other spellings (texts, or
    True/False/None) to a choice."""

    def __init__(self, *choices, aliases: Optional[dict] = None):
        self.choices = choices
        aliases = aliases or {}
        self.text_aliases = {name.lower(): target for name, target in aliases.items() if isinstance(name, str)}
        self.other_aliases = [(name, target) for name, target in aliases.items() if not isinstance(name, str)]

    def check(self, value):
        if isinstance(value, str):
            word = value.strip().lower()
            for choice in self.choices:
                if isinstance(choice, str) and choice.lower() == word:
                    return choice
            if word in self.text_aliases:
                return self.text_aliases[word]
            raise Invalid()
        for choice in self.choices:
            if not isinstance(choice, str) and value is choice:
                return choice
        for name, target in self.other_aliases:
            if value is name:
                return target
        raise Invalid()

    def describe(self, plural=False):
        names = [_yaml_word(choice) for choice in self.choices]
        if len(names) < 3:
            return " or ".join(names)
        if plural:  # "a list of tensorboard, csv or mlflow"
            return f"{', '.join(names[:-1])} or {names[-1]}"
        return f"one of {', '.join(names)}"


class Named(Kind):
    """A name a registry resolves: ``resolve(name)`` returns its canonical form or raises a BaseTrainerError
    whose message (naming what exists) becomes the detail."""

    def __init__(self, resolve: Callable[[str], str], what: str):
        self.resolve, self.what = resolve, what

    def check(self, value):
        if not isinstance(value, str):
            raise Invalid()
        try:
            return self.resolve(value)
        except BaseTrainerError as error:  # the registry's own one-line error: unknown name, with the known ones
            raise Invalid(str(error)) from None

    def describe(self, plural=False):
        return self.what


class ListOf(Kind):
    """A list (or tuple) of ``item`` values, ``length`` long or between ``min_length`` and ``max_length``;
    ``unique`` refuses repeats; ``single`` also takes one item alone (returned as a list of it)."""

    def __init__(self, item: Kind, length: Optional[int] = None, min_length: int = 0,
                 max_length: Optional[int] = None, unique: bool = False, single: bool = False, meaning: str = ""):
        self.item, self.unique, self.single, self.meaning = item, unique, single, meaning
        self.min_length = length if length is not None else min_length
        self.max_length = length if length is not None else max_length

    @property
    def flag_type(self):
        return self.item.flag_type

    def check(self, value):
        if self.single and not isinstance(value, (list, tuple)):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise Invalid()
        if not _within(len(value), self.min_length, self.max_length):
            raise Invalid(f"it has {len(value)} item{'s' if len(value) != 1 else ''}")
        items = []
        for index, item in enumerate(value):
            items.append(_check_part(self.item, item, f"item {index}"))
        if self.unique and len(set(map(repr, items))) < len(items):
            raise Invalid("an item is repeated")
        return items

    def describe(self, plural=False):
        if self.min_length == self.max_length:
            count = f"{self.min_length} "
        elif self.max_length is None:
            count = f"{self.min_length} or more " if self.min_length else ""
        else:
            count = f"{self.min_length} to {self.max_length} "
        what = f"a list of {count}{self.item.describe(plural=True)}"
        what += f" {self.meaning}" if self.meaning else ""
        return f"{self.item.describe()} or {what}" if self.single else what


class Positions(Kind):
    """A list (or tuple) of as many values as ``kinds``, each of its position's kind; ``names`` name the
    positions in words."""

    def __init__(self, *kinds: Kind, names: tuple):
        self.kinds, self.names = kinds, names

    def check(self, value):
        if not isinstance(value, (list, tuple)):
            raise Invalid()
        if len(value) != len(self.kinds):
            raise Invalid(f"it has {len(value)} item{'s' if len(value) != 1 else ''}")
        items = []
        for name, kind, item in zip(self.names, self.kinds, value):
            items.append(_check_part(kind, item, name))
        return items

    def describe(self, plural=False):
        kinds = ", ".join(kind.describe() for kind in self.kinds)
        return f"[{', '.join(self.names)}]: {kinds}"


class Fields(Kind):
    """A mapping of named fields, each ``name=(kind, default)``: a field missing or null takes its default, a
    name that is no field is refused (quoted unless a plain name); checked into a plain dict of every field."""

    def __init__(self, **fields):
        self.fields = fields

    def defaults(self) -> dict:
        return {name: default for name, (_, default) in self.fields.items()}

    def check(self, value):
        if not isinstance(value, dict):
            raise Invalid()
        unknown = sorted(set(value) - set(self.fields), key=str)
        if unknown:
            names = [name if isinstance(name, str) and name.isidentifier() else repr(name) for name in unknown]
            raise Invalid(f"{', '.join(names)} is no field of it")
        checked = self.defaults()
        checked.update({name: _check_part(self.fields[name][0], given, name) for name, given in value.items()
                        if given is not None})
        return checked

    def describe(self, plural=False):
        fields = ", ".join(f"{name} ({kind.describe()})" for name, (kind, _) in self.fields.items())
        return f"{'mappings' if plural else 'a mapping'} of {fields}"


class MappingOf(Kind):
    """A mapping of any number of entries, each key of ``key``'s kind and each value of ``value``'s."""

    def __init__(self, key: Kind, value: Kind):
        self.key, self.value = key, value

    def check(self, value):
        if not isinstance(value, dict):
            raise Invalid()
        return {_check_part(self.key, key, "a key", described=True): _check_part(self.value, item, key, described=True)
                for key, item in value.items()}

    def describe(self, plural=False):
        return f"{'mappings' if plural else 'a mapping'} of {self.key.describe(True)} to {self.value.describe(True)}"


class OneOf(Kind):
    """The first of ``kinds`` that takes the value; a :class:`Choice` takes a list of one word as the word (a flag
    of several values typed with the word alone: ``--milestones auto``)."""

    def __init__(self, *kinds: Kind):
        self.kinds = kinds

    @property
    def flag_type(self):
        return self.kinds[-1].flag_type

    def check(self, value):
        one_word = isinstance(value, (list, tuple)) and len(value) == 1 and isinstance(value[0], str)
        details = []
        for kind in self.kinds:
            try:
                return kind.check(value[0] if one_word and isinstance(kind, Choice) else value)
            except Invalid as error:
                details.append(error.detail)
        detail = next((text for text in details if text), "")
        raise Invalid(detail)

    def describe(self, plural=False):
        return " or ".join(kind.describe(plural) for kind in self.kinds)


def _check_part(kind: Kind, value, label: str, described: bool = False):
    """``kind.check(value)`` for a part of a larger value; refused as Invalid("``label`` is ``value``: why")
    (``described``: and what ``kind`` accepts)."""
    try:
        return kind.check(value)
    except Invalid as error:
        what = f", not {kind.describe()}" if described else ""
        raise Invalid(f"{label} is {shown(value)}{what}" + (f": {error.detail}" if error.detail else "")) from None


def shown(value, limit: int = 60) -> str:
    """``value`` for a one-line message: its type and a repr cut to ``limit`` characters (``null`` for None)."""
    if value is None:
        return "null"
    text = repr(value)
    return f"{type(value).__name__} {text[: limit - 3] + '...' if len(text) > limit else text}"


def _within(value, minimum, maximum, above=False, below=False):
    if minimum is not None and (value <= minimum if above else value < minimum):
        return False
    return maximum is None or (value < maximum if below else value <= maximum)


def _bounds(minimum, maximum, above=False, below=False):
    if minimum is not None and maximum is not None:
        return f" in {'(' if above else '['}{_number(minimum)}, {_number(maximum)}{')' if below else ']'}"
    if minimum is not None:
        return f" {'>' if above else '>='} {_number(minimum)}"
    if maximum is not None:
        return f" {'<' if below else '<='} {_number(maximum)}"
    return ""


def _number(value):
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e6:
        return str(int(value))
    return f"{value:g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-") if isinstance(value, float) else str(value)


def _yaml_word(value):
    if isinstance(value, str):
        return value
    return "null" if value is None else str(value).lower()  # True, False
