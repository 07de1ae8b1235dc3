"""Declared settings: every config key a library reads, stated once with its kind, default, unit and help.

A :class:`Setting` is one key; a :class:`Schema` is the keys one reader takes (the loop's
in :mod:`basetrainer.engine.settings`, the classification task's in
:mod:`basetrainer.tasks.classification.settings`). From a schema come the defaults, the
checks (a value is refused with one line naming the key, the value, where it came from
and what is allowed), the flags of a command line (:mod:`.flags`) and the configuration
reference (:mod:`basetrainer.config.reference`)::

    LOOP = Schema([
        Setting("accumulate_grad_batches", Integer(minimum=1), 1, "batches per optimizer step",
                unit="batches"),
        ...
    ])
    LOOP.read(cfg, source="in the config")   # every key: its checked value, or its default
"""
import dataclasses
import difflib
from typing import Any, Callable, Mapping, Optional, Union

from basetrainer.errors import ConfigError

from .kinds import Invalid, Kind, Named, shown
from .mapping import option

Source = Union[str, Callable[[str], str]]  # where values came from, for the message: "in c.yaml line 3"


@dataclasses.dataclass(frozen=True)
class Setting:
    """One config key: ``kind`` says what it accepts, ``default`` what it is when not given.

    ``nullable``: null is a value of its own (``help`` says what it means), not "the default".
    ``group`` is its section in the reference and in ``--help``. ``flag``: None for a key set
    only in YAML or as ``key=value``; otherwise add_argument's keywords for ``--<name>`` beyond
    what the kind implies (``{}`` for none; ``"names"`` replaces the option strings).
    """

    name: str
    kind: Kind
    default: Any
    help: str
    unit: str = ""
    nullable: bool = False
    group: str = ""
    flag: Optional[dict] = None

    def allowed(self) -> str:
        """What the key accepts, in words: "an integer >= 1", "true or false", "... or null"."""
        return self.kind.describe() + (" or null" if self.nullable else "")

    def check(self, value, source: str = "") -> Any:
        """``value`` in canonical form; a one-line ConfigError when the key does not accept it."""
        if value is None and self.nullable:
            return None
        try:
            if value is None:
                raise Invalid()
            return self.kind.check(value)
        except Invalid as error:
            raise ConfigError(self._refusal(value, error.detail, source)) from None

    def _refusal(self, value, detail, source):
        where = f" ({source})" if source else ""
        if isinstance(self.kind, Named) and detail:
            return f"config key {self.name!r}: {detail}{where}"
        if isinstance(value, str) and value.strip().lower() in ("none", "null") and self.nullable:
            detail = detail or "for null write null or ~ (None is text in YAML)"
        return (f"config key {self.name!r} expects {self.allowed()}, got {shown(value)}{where}"
                + (f": {detail}" if detail else ""))


class Schema:
    """The settings one reader takes, in declaration order."""

    def __init__(self, settings):
        self._settings = {}
        for setting in settings:
            if setting.name in self._settings:
                raise ValueError(f"setting {setting.name!r} is declared twice")
            self._settings[setting.name] = setting

    def __iter__(self):
        return iter(self._settings.values())

    def __contains__(self, name):
        return name in self._settings

    def __getitem__(self, name) -> Setting:
        return self._settings[name]

    def __len__(self):
        return len(self._settings)

    def names(self) -> list:
        return list(self._settings)

    def defaults(self) -> dict:
        return {setting.name: setting.default for setting in self}

    def replace(self, name: str, **changes) -> "Schema":
        """This schema with the setting ``name`` changed (e.g. another default for one task)."""
        return Schema(dataclasses.replace(s, **changes) if s.name == name else s for s in self)

    def __add__(self, other) -> "Schema":
        """The settings of both; those of ``other`` replace same-named ones here, in place."""
        extra = {setting.name: setting for setting in other}
        merged = [extra.pop(setting.name, setting) for setting in self]
        return Schema([*merged, *extra.values()])

    def check(self, values: Mapping, source: Source = "", strict: bool = False) -> dict:
        """The canonical value of every declared key in ``values``; a one-line ConfigError for the first value
        a key does not accept, and with ``strict`` for a key not declared (suggesting the closest)."""
        checked = {}
        for key, value in values.items():
            where = source(key) if callable(source) else source
            if key in self._settings:
                checked[key] = self._settings[key].check(value, where)
            elif strict:
                raise ConfigError(self._unknown(key, where))
        return checked

    def read(self, cfg, source: Source = "") -> dict:
        """Every declared key of ``cfg`` (a dict, a Config or an argparse.Namespace), checked; a key that is
        missing or None takes its default, as :func:`~basetrainer.config.option` reads it. Keys of ``cfg``
        that are not declared are the caller's own and pass through unchecked."""
        values = {}
        for setting in self:
            value = option(cfg, setting.name, None)
            where = source(setting.name) if callable(source) else source
            values[setting.name] = setting.default if value is None else setting.check(value, where)
        return values

    def _unknown(self, key, where):
        place = f" ({where})" if where else ""
        close = difflib.get_close_matches(str(key), self.names(), n=1)
        hint = f": did you mean {close[0]!r}?" if close else "; check its spelling or remove it"
        return f"unknown config key {str(key)!r}{place}{hint}"
