"""Command-line flags made from declared settings, and a parser whose errors are one line."""
import argparse
import copy
import sys

from .kinds import Boolean, Invalid, ListOf


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, but a mistake on the command line is one line on stderr (``error: ...``, naming
    ``--help``) and exit code 2, like every other refusal, instead of the usage block and the error.

    ``%(prog)s`` in the description and the epilog reads as the program's name wherever they are read:
    in ``--help``, and in the CLI reference, whose sphinx-argparse takes them as written."""

    @property
    def description(self):
        return self._with_prog(self._description)

    @description.setter
    def description(self, text):
        self._description = text

    @property
    def epilog(self):
        return self._with_prog(self._epilog)

    @epilog.setter
    def epilog(self, text):
        self._epilog = text

    def _with_prog(self, text):
        return text.replace("%(prog)s", self.prog) if text else text

    def error(self, message):
        print(f"error: {self.prog}: {' '.join(message.split())}; see {self.prog} --help", file=sys.stderr)
        sys.exit(2)


def add_setting_flags(parser, schema, group_titles=None, checked=False):
    """Adds ``schema``'s settings to ``parser``: a flag for each one that declares one, in argument groups
    by ``group`` (titled by ``group_titles``), and the default of every other one (set as YAML or
    ``key=value``). The help of a flag is the setting's help, what it accepts and its unit. Groups are made
    in the order of ``group_titles``, then as met. ``checked``: argparse checks each value against its kind
    (its refusal is then "argument --topk: expects an integer >= 1, got 0"); otherwise the caller checks
    the values, knowing where each came from."""
    titles = dict(group_titles or {})
    flagged = [setting for setting in schema if setting.flag is not None]
    order = [*titles, *(setting.group for setting in flagged if setting.group not in titles)]
    groups = {name: parser.add_argument_group(titles.get(name, name)) if name else parser
              for name in dict.fromkeys(order) if any(setting.group == name for setting in flagged)}
    for setting in schema:
        if setting.flag is None:
            parser.set_defaults(**{setting.name: copy.deepcopy(setting.default)})
            continue
        # A flag that declares its own action says all: store_const takes no type, for instance.
        options = dict(setting.flag) if "action" in setting.flag else {**_implied_options(setting), **setting.flag}
        if checked and "type" in options:
            options["type"] = _checked_type(setting.kind.item if isinstance(setting.kind, ListOf) else setting.kind)
        names = options.pop("names", (f"--{setting.name}",))
        groups[setting.group].add_argument(*names, dest=setting.name, default=copy.deepcopy(setting.default),
                                           help=flag_help(setting), **options)
    return parser


def flag_help(setting) -> str:
    """``help (what it accepts; unit)`` with argparse's % escaped; a switch (true or false) says no more."""
    details = [setting.allowed()] if not isinstance(setting.kind, Boolean) else []
    details += [setting.unit] if setting.unit else []
    return (setting.help + (f" ({'; '.join(details)})" if details else "")).replace("%", "%%")


def _implied_options(setting) -> dict:
    kind = setting.kind
    if isinstance(kind, Boolean):
        return {"action": "store_true"} if setting.default is False else {"action": argparse.BooleanOptionalAction}
    if isinstance(kind, ListOf):
        same = kind.min_length == kind.max_length
        return {"nargs": kind.min_length if same else ("+" if kind.min_length else "*"), "type": kind.flag_type}
    return {"type": kind.flag_type}


def _checked_type(kind):
    """An argparse ``type`` that converts a flag's text as ``kind.flag_type`` does, then checks it against ``kind``."""
    def convert(text):
        value = kind.flag_type(text)  # a ValueError here is argparse's "invalid int value: 'x'"
        try:
            return kind.check(value)
        except Invalid as error:
            detail = f": {error.detail}" if error.detail else ""
            raise argparse.ArgumentTypeError(f"expects {kind.describe()}, got {text}{detail}") from None

    convert.__name__ = kind.flag_type.__name__
    return convert
