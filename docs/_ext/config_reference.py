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

import yaml
from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
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


def escape(text: str) -> str:
    return text.replace("|", r"\|")


class ConfigKeys(SphinxDirective):
    """``.. config-keys:: configs/config.yaml`` with ``:parser: module:function``: a table per section."""

    required_arguments = 1
    option_spec = {"parser": directives.unchanged_required}

    def run(self):
        path = Path(self.env.srcdir).parent / self.arguments[0]
        self.env.note_dependency(str(path))
        module, function = self.options["parser"].split(":")
        flags = flags_of(getattr(importlib.import_module(module), function)())
        lines = []
        for section, keys in read_commented_yaml(path).items():
            lines += [f".. rubric:: {section.capitalize()}", "", ".. list-table::", "   :header-rows: 1",
                      "   :widths: 22 18 60", "", "   * - key", "     - default", "     - meaning"]
            for key in keys:
                flag = f" (``{flags[key.name]}``)" if key.name in flags else ""
                lines += [f"   * - .. _config-{key.name.replace('_', '-')}:", "",
                          f"       ``{key.name}``{flag}", f"     - ``{key.value}``", f"     - {escape(key.comment)}"]
            lines.append("")
        return self.parse(lines)

    def parse(self, lines):
        container = nodes.container()
        source = self.get_source_info()[0]
        self.state.nested_parse(StringList(lines, source=source), self.content_offset, container)
        return container.children


class LoopKeys(ConfigKeys):
    """``.. loop-keys::``: the keys :class:`~basetrainer.engine.options.LoopOptions` reads, with their defaults."""

    required_arguments = 0
    option_spec = {}

    def run(self):
        from basetrainer.engine.options import LoopOptions

        lines = [".. list-table::", "   :header-rows: 1", "   :widths: 40 60", "", "   * - key", "     - default"]
        for field in dataclasses.fields(LoopOptions):
            lines += [f"   * - ``{field.name}``", f"     - ``{field.default!r}``"]
        return self.parse(lines)


def setup(app):
    app.add_directive("config-keys", ConfigKeys)
    app.add_directive("loop-keys", LoopKeys)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
