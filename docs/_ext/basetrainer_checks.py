"""Checks that fail the documentation build (as warnings, under ``-W``) for defects a reader would meet.

- A code line wider than the code box at 1280 px (``CODE_COLUMNS`` characters, from docs/_static/basetrainer.css):
  the end of a command, or its comment, would need scrolling to be seen. Every literal block is checked; a block
  of a program's output shown as it printed it may be wider when it says so (``:class: wide-output``).
- A link the reader cannot follow in the HTML written: an autolinked e-mail address (``mAP@0.5`` read as
  ``mailto:``), a link of any scheme but http(s) (``tcp://<host>:<port>`` in a help text read as a link), or an
  http(s) link without a host.
- A flag of a ``basetrainer`` command that the command-line reference omits: each ``argparse`` directive's flags
  are compared with those of the parser the command's ``--help`` prints (:func:`basetrainer.cli.command_parsers`),
  and every command must have a section.
"""
import argparse
import html
import re
from pathlib import Path

from docutils import nodes
from sphinx.util import logging

logger = logging.getLogger(__name__)

# The code box at 1280 px holds 103 characters (see basetrainer.css); a little less, so that a vertical scrollbar
# or a font a little wider than 0.6em does not hide the last one.
CODE_COLUMNS = 100
WIDE_OUTPUT = "wide-output"  # the class of a block of program output whose lines may be wider

HREF = re.compile(r'<a\s[^>]*?href="([^"]*)"', re.IGNORECASE)
SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*):")


# ------------------------------------------------------------------ code lines
def check_code_width(app, doctree, docname):
    """Warns for each literal block with a line wider than ``CODE_COLUMNS`` (the widest line, once per block)."""
    for block in doctree.findall(nodes.literal_block):
        if WIDE_OUTPUT in block.get("classes", ()):
            continue
        lines = block.astext().expandtabs().splitlines()
        widest = max(lines, key=len, default="")
        if len(widest) > CODE_COLUMNS:
            number = lines.index(widest) + 1
            logger.warning("code line %d of a block is %d characters wide, over the %d the code box shows at "
                           "1280 px: split it, a comment on a line of its own (%s...)", number, len(widest),
                           CODE_COLUMNS, widest[:40], location=block, type="basetrainer", subtype="code-width")


# ------------------------------------------------------------------ links in the HTML
def broken_links(page_html: str) -> list:
    """The links of a page a reader cannot follow: ``(href, why)`` for each."""
    found = []
    for href in HREF.findall(page_html):
        href = html.unescape(href)
        scheme = SCHEME.match(href)
        if scheme is None:
            continue  # a link within the site
        name = scheme.group(1).lower()
        if name == "mailto":
            found.append((href, "an e-mail link: text with an @ read as an address (write it as code, ``mAP@0.5``)"))
        elif name not in ("http", "https"):
            found.append((href, f"a {name}: link: an address in the text read as a link (write it as code, or "
                                f"escape it: {name}\\://)"))
        elif not re.match(r"^https?://[^/\s]+", href):
            found.append((href, "an http link without a host"))
    return found


def check_html_links(app, exception):
    """Warns for every link in the HTML pages written that a reader cannot follow (:func:`broken_links`)."""
    if exception is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    for page in sorted(outdir.rglob("*.html")):
        for href, why in broken_links(page.read_text(encoding="utf-8", errors="replace")):
            logger.warning("%s links to %r: %s", page.relative_to(outdir), href, why, type="basetrainer",
                           subtype="html-link")


# ------------------------------------------------------------------ the command-line reference
def parser_flags(parser: argparse.ArgumentParser) -> set:
    """What the reference must show of ``parser``: every option string and positional argument, but ``--help``
    and what argparse itself hides (``help=SUPPRESS``)."""
    flags = set()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        flags.update(action.option_strings or [action.metavar or action.dest])
    return flags


def rendered_flags(items) -> set:
    """The flags and positional arguments that the nodes ``items`` of an ``argparse`` directive show."""
    flags = set()
    for item in items:
        for option in item.findall(nodes.option_string):
            flags.update(name.strip() for name in option.astext().split(","))
    return flags


def check_command_reference(directive, command: str, items) -> None:
    """Warns when the nodes ``items`` that document ``command`` (``basetrainer train --task detection``) leave out
    a flag its ``--help`` shows, or when ``command`` is no command of ``basetrainer``; records the command as
    documented."""
    from basetrainer.cli import command_parsers

    env = directive.env
    parsers = command_parsers()
    location = directive.get_location()
    if command not in parsers:
        logger.warning("the command-line reference documents %r, which is no basetrainer command (those are: %s)",
                       command, ", ".join(parsers), location=location, type="basetrainer", subtype="cli")
        return
    missing = parser_flags(parsers[command]) - rendered_flags(items)
    if missing:
        logger.warning("the reference of %r leaves out %s, which %s --help shows: document the parser that --help "
                       "prints (basetrainer.cli.command_parsers)", command, ", ".join(sorted(missing)), command,
                       location=location, type="basetrainer", subtype="cli")
    documented = env.basetrainer_commands = getattr(env, "basetrainer_commands", {})
    documented[command] = env.docname


def check_every_command_documented(app, env):
    """Warns for each ``basetrainer`` command that no ``argparse`` directive documents, once some page has a
    command-line reference."""
    documented = getattr(env, "basetrainer_commands", {})
    if not documented:
        return
    from basetrainer.cli import command_parsers

    for command in command_parsers():
        if command not in documented:
            logger.warning("the command-line reference has no section for %r (its pages: %s)", command,
                           ", ".join(sorted(set(documented.values()))), type="basetrainer", subtype="cli")


def purge_commands(app, env, docname):
    documented = getattr(env, "basetrainer_commands", {})
    for command in [command for command, page in documented.items() if page == docname]:
        del documented[command]


def merge_commands(app, env, docnames, other):
    env.basetrainer_commands = {**getattr(env, "basetrainer_commands", {}),
                                **getattr(other, "basetrainer_commands", {})}


def setup(app):
    app.connect("doctree-resolved", check_code_width)
    app.connect("build-finished", check_html_links)
    app.connect("env-purge-doc", purge_commands)
    app.connect("env-merge-info", merge_commands)
    app.connect("env-check-consistency", check_every_command_documented)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
