"""The configuration reference, written from declared settings: a commented YAML file and Markdown tables.

Both are made, never edited by hand: what a key accepts, its default, unit and help are
stated once, in its :class:`~basetrainer.config.schema.Setting`.
"""
import textwrap

import yaml

VALUE_COLUMN = 32  # where the comments of a YAML reference start
WIDTH = 118
MIN_COMMENT_WIDTH = 40  # narrower than this beside a long default, a comment goes above it
LONG_ACCEPTS = 200  # characters of what a key accepts that still fit a table's cell


def yaml_text(value) -> str:
    """``value`` as one line of YAML (``null``, ``false``, ``[32, 32]``, ``work_dirs/x``)."""
    return yaml.safe_dump(value, default_flow_style=True, width=10 ** 6).strip().removesuffix("...").strip()


def yaml_reference(schema, groups: dict, header: str) -> str:
    """A YAML file of every setting of ``schema`` whose group is in ``groups`` (group -> section title), in
    that order: ``key: default`` and a comment with the help, what the key accepts and its unit."""
    lines = [f"# {line}".rstrip() for line in header.strip().splitlines()]
    for group, title in groups.items():
        settings = [setting for setting in schema if setting.group == group]
        if not settings:
            continue
        lines += ["", f"# {'-' * 64} {title}"]
        for setting in settings:
            lines += _setting_lines(setting)
    return "\n".join(lines) + "\n"


def _setting_lines(setting) -> list:
    """``key: default`` with its comment; a mapping too long for one line beside its comment, one field a line."""
    code = f"{setting.name}: {yaml_text(setting.default)}"
    if len(code) + 2 > WIDTH - MIN_COMMENT_WIDTH and isinstance(setting.default, dict):
        fields = [f"  {name}: {yaml_text(value)}" for name, value in setting.default.items()]
        return [*_commented(f"{setting.name}:", _comment(setting)), *fields]
    return _commented(code, _comment(setting))


def markdown_reference(schema, groups: dict, flags: bool = True) -> str:
    """A Markdown table per group of ``groups`` (group -> title): key (and its flag, with ``flags``), default,
    what it accepts (and its unit), help. Each table is in a ``settings-table`` container, whose style
    (docs/_static/basetrainer.css) fits it to the text column, and stacks its rows on a narrow screen. What a
    key accepts, when longer than ``LONG_ACCEPTS`` characters (a nested mapping), is written below the table at
    the text's full width instead of filling a narrow cell."""
    parts = []
    for group, title in groups.items():
        settings = [setting for setting in schema if setting.group == group]
        if not settings:
            continue
        rows = ["| key | default | accepts | what it does |", "| --- | --- | --- | --- |"]
        below = []
        for setting in settings:
            flag = f", flag `--{setting.name}`" if flags and setting.flag is not None else ""
            accepts = setting.allowed() + (f", in {setting.unit}" if setting.unit else "")
            if len(accepts) > LONG_ACCEPTS:
                below.append(f"`{setting.name}` accepts {accepts}.\n")
                accepts = "see below the table"
            cells = [f"`{setting.name}`{flag}", f"`{yaml_text(setting.default)}`", accepts, setting.help]
            rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
        table = f"### {title}\n\n:::{{container}} settings-table\n" + "\n".join(rows) + "\n:::\n"
        parts.append("\n".join([table, *below]))
    return "\n".join(parts)


def _comment(setting) -> str:
    details = "; ".join(part for part in (setting.allowed(), setting.unit) if part)
    return f"{setting.help} ({details})"


def _commented(code: str, comment: str) -> list:
    column = max(VALUE_COLUMN, len(code) + 2)
    wrapped = textwrap.wrap(comment, width=WIDTH - column - 2) or [""]
    first = f"{code.ljust(column)}# {wrapped[0]}"
    return [first, *(f"{' ' * column}# {line}" for line in wrapped[1:])]
