"""The configuration reference, generated: the keys of a commented YAML file, with the flag and
the default the task's argparse parser gives each, and the keys the training loop reads.

``configs/config.yaml`` documents every key of the classification task in a comment beside
it, in sections headed ``# ---- name``; the parser (``get_parser`` of the task) gives the
flag, if the key has one. The loop's keys are the fields of
:class:`basetrainer.engine.options.LoopOptions`.
"""
import dataclasses
import importlib
import re
from pathlib import Path
from typing import ClassVar

import yaml
from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

SECTION = re.compile(r"^# -+ (?P<name>.+)$")
KEY = re.compile(r"^(?P<key>[a-z_][a-z0-9_]*):\s*(?P<value>[^#]*?)\s*(#\s?(?P<comment>.*))?$")
CONTINUATION = re.compile(r"^\s+#\s?(?P<comment>.*)$")


@dataclasses.dataclass
class Key:
    name: str
    value: str  # as written in the file
    comment: str
    flag: str = ""


def read_commented_yaml(path: Path) -> dict:
    """``{section: [Key, ...]}`` in the file's order; a comment continued on the lines below a key is joined."""
    sections, current, key = {}, None, None
    for line in path.read_text(encoding="utf-8").splitlines():
        if match := SECTION.match(line):
            current, key = sections.setdefault(match["name"].strip(), []), None
        elif current is not None and (match := KEY.match(line)):
            key = Key(match["key"], match["value"], (match["comment"] or "").strip())
            current.append(key)
        elif key is not None and (match := CONTINUATION.match(line)):
            key.comment = f"{key.comment} {match['comment'].strip()}".strip()
        else:
            key = None
    values = yaml.safe_load(path.read_text(encoding="utf-8"))
    missing = set(values) - {key.name for keys in sections.values() for key in keys}
    if missing:
        raise ValueError(f"{path}: keys outside a '# ---- section' or without 'key: value' form: {sorted(missing)}")
    return sections


def flags_of(parser) -> dict:
    """``{dest: "--flag"}`` for every option of ``parser`` that has one."""
    return {action.dest: max(action.option_strings, key=len) for action in parser._actions if action.option_strings}


def table(widths, header, rows) -> nodes.table:
    """A docutils table: ``rows`` are ``(row id or None, [cell, ...])``; a cell is its lines, each a
    list of inline nodes."""
    group = nodes.tgroup(cols=len(widths))
    group += [nodes.colspec(colwidth=width) for width in widths]
    group += nodes.thead("", row_of([[[nodes.Text(title)]] for title in header]))
    group += nodes.tbody("", *(row_of(cells, row_id) for row_id, cells in rows))
    return nodes.table("", group)


def row_of(cells, row_id=None) -> nodes.row:
    row = nodes.row(ids=[row_id] if row_id else [])
    row += [nodes.entry("", *(nodes.paragraph("", "", *line) for line in cell)) for cell in cells]
    return row


def code(text: str) -> nodes.literal:
    return nodes.literal(text, text)


class ConfigKeys(SphinxDirective):
    """``.. config-keys:: configs/config.yaml`` with ``:parser: module:function``: a table per section,
    each row anchored as ``#config-<key>``."""

    required_arguments = 1
    option_spec: ClassVar = {"parser": directives.unchanged_required}

    def run(self):
        path = Path(self.env.srcdir).parent / self.arguments[0]
        self.env.note_dependency(str(path))
        module, function = self.options["parser"].split(":")
        flags = flags_of(getattr(importlib.import_module(module), function)())
        result = []
        for section, keys in read_commented_yaml(path).items():
            rows = [(f"config-{key.name}", [[[code(key.name)], *([[code(flags[key.name])]] if key.name in flags else [])],
                                            [[code(key.value)]], [[nodes.Text(key.comment)]]])
                    for key in keys]
            result += [nodes.rubric(text=section.capitalize()), table((26, 16, 58), ("key", "default", "meaning"), rows)]
        return result


class LoopKeys(SphinxDirective):
    """``.. loop-keys::``: the keys :class:`~basetrainer.engine.options.LoopOptions` reads, with their defaults."""

    def run(self):
        from basetrainer.engine.options import LoopOptions

        rows = [(None, [[[code(field.name)]], [[code(repr(field.default))]]]) for field in dataclasses.fields(LoopOptions)]
        return [table((40, 60), ("key", "default"), rows)]


def setup(app):
    app.add_directive("config-keys", ConfigKeys)
    app.add_directive("loop-keys", LoopKeys)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
