"""Sphinx extensions of basetrainer's documentation."""
import importlib
import inspect
import re
from pathlib import Path

from sphinx import addnodes
from sphinxarg.ext import ArgParseDirective

from basetrainer.config.reference import yaml_text
from basetrainer_checks import check_command_reference


def canonical_name(target: str):
    """The dotted name under which ``target`` is documented: a name re-exported by a package
    (``basetrainer.EngineTrainer``) is documented where it is defined
    (``basetrainer.engine.trainer.EngineTrainer``). None when ``target`` is no importable name."""
    parts = target.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for name in parts[split:]:
                obj = getattr(obj, name)
        except AttributeError:
            return None
        if hasattr(obj, "__qualname__") and hasattr(obj, "__module__"):
            return f"{obj.__module__}.{obj.__qualname__}"
        return getattr(obj, "__name__", None) if not parts[split:] else None
    return None


def resolve_imported_name(app, env, node, contnode):
    """Resolves a Python reference the way Python resolves the name: a name re-exported by a
    package (``basetrainer.launch``, ``basetrainer.callbacks.EMA``), or a name a docstring's module
    imports (``RunState`` in :mod:`basetrainer.engine.events`), links to the page of the object
    it names."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip(".~")
    scopes = [node.get("py:module"), "basetrainer"] if not target.startswith("basetrainer.") else [None]
    canonical = None
    for scope in scopes:
        if scope is not None or target.startswith("basetrainer."):
            canonical = canonical_name(f"{scope}.{target}" if scope else target)
        if canonical:
            break
    if canonical is None or canonical == target or not canonical.startswith("basetrainer"):
        return None
    domain = env.get_domain("py")
    node = node.deepcopy()
    node["reftarget"] = canonical
    return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], canonical, node, contnode)


def include_undocumented_code(app, what, name, obj, skip, options):
    """Every public class, function and method is in the reference, documented or not; variables
    are there only with a ``#:`` comment of their own (a bare value would only repeat the source)."""
    if skip and not name.startswith("_") and (inspect.isclass(obj) or inspect.isroutine(obj)):
        return False
    return None


def names_with_a_page_of_their_own(app, config):
    """The classes and functions that docs/reference/api/*.md document (``.. autoclass:: basetrainer...``):
    what users touch has a page of its own, which is where references to it lead."""
    pages = Path(app.srcdir, "reference", "api").glob("*.md")
    app.user_facing_names = {name for page in pages for name in
                             re.findall(r"^\.\. auto(?:class|function):: (\S+)", page.read_text(encoding="utf-8"),
                                        re.MULTILINE)}


def leave_to_its_own_page(app, what, name, obj, skip, options):
    """A module's page in the module tree leaves out what has a page of its own (a second description of
    it would make two targets for one name)."""
    qualified = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"
    return True if what == "module" and qualified in app.user_facing_names else None


def link_source_files_to_modules(app, doctree):
    """A Markdown link to a module's file (``[trainer.py](../basetrainer/engine/trainer.py)``, as
    docs/ARCHITECTURE.md has, readable on GitHub too) links to the module's API page, checked
    like any reference, instead of offering the file for download."""
    repository = Path(app.srcdir).resolve().parent
    page_folder = Path(app.env.doc2path(app.env.docname)).parent
    for node in list(doctree.findall(addnodes.download_reference)):
        path = (page_folder / node["reftarget"]).resolve()
        if path.suffix != ".py" or not path.is_relative_to(repository / "basetrainer"):
            continue
        module = ".".join(path.relative_to(repository).with_suffix("").parts).removesuffix(".__init__")
        node.replace_self(addnodes.pending_xref("", *node.children, refdomain="py", reftype="mod", reftarget=module,
                                                refexplicit=True, refwarn=True, refdoc=app.env.docname))


def follow_names_within_the_package(app, modname, fullname):
    """The module whose source shows ``modname.fullname``: where it is defined when that is in basetrainer,
    else ``modname`` itself (a constant that is a dict or a builtin has no source of its own: viewcode
    listed a ``builtins`` page it could not write)."""
    try:
        obj = importlib.import_module(modname)
        for name in fullname.split("."):
            obj = getattr(obj, name)
    except (ImportError, AttributeError):
        return modname
    defined_in = getattr(obj, "__module__", None)
    return defined_in if isinstance(defined_in, str) and defined_in.startswith("basetrainer") else modname


def plain_text_as_rst(text: str) -> str:
    """A help text, written for a terminal, as reStructuredText that shows it as it is: the characters that
    would start markup escaped, an address (``tcp://<host>:<port>``) or an ``@`` (``mAP@0.5``) no link."""
    return re.sub(r"([\\`*|_@]|:(?=//))", r"\\\1", text)


def raw_text_as_rst(text: str) -> str:
    """argparse's raw description or epilog (RawDescriptionHelpFormatter) as reStructuredText: each run of
    indented lines (the examples) is a block of shell commands, one per line, after the line that introduces
    it; the other lines are prose, shown as they are (:func:`plain_text_as_rst`)."""
    lines, indented_before = [], False
    for line in text.splitlines():
        indented = line.startswith(" ") and bool(line.strip())
        if indented and not indented_before:
            lines += ["", ".. code-block:: bash", ""]
        elif indented_before and not indented:
            lines.append("")
        lines.append(line if indented else plain_text_as_rst(line))
        indented_before = indented
    return "\n".join(lines)


def choices_with_their_help(entry, children) -> None:
    """A positional argument whose choices are commands (``COMMAND``): each command with its help, as ``--help``
    lists them, instead of the names alone."""
    helps = {child["name"]: child.get("help") or "" for child in children}
    if set(entry.get("choices") or ()) != set(helps) or not helps:
        return
    listed = "\n".join(f"* ``{name}``: {plain_text_as_rst(helps[name])}" for name in entry.pop("choices"))
    entry["help"] = "\n\n".join(part for part in (entry.get("help"), listed) if part)


def yaml_default(default):
    """A flag's default as the configuration reference writes it (``SGD``, ``null``, ``false``, ``[32, 32]``),
    not as sphinx-argparse hands it over (``'SGD'``, quoted; None, not shown)."""
    if isinstance(default, str):
        unquoted = default[1:-1] if len(default) >= 2 and default[0] == default[-1] == "'" else default
        return unquoted if unquoted.strip() and unquoted == unquoted.strip() else yaml_text(unquoted)
    return yaml_text(default)


def _says_no_default(entry) -> bool:
    """Whether an argument whose default is None shows none: a positional one (``COMMAND``), a flag whose
    help says what its default is, or one for which null means nothing (a required flag, ``--out``): only a
    setting's flag whose help names null (``the GPU to use (null: the CPU)``) shows ``null``."""
    return not entry["name"][0].startswith("-") or "default" in entry["help"] or "null" not in entry["help"]


class RawTextArgParseDirective(ArgParseDirective):
    """sphinx-argparse's ``argparse`` directive, reading the parsers as ``--help`` prints them: examples as
    code lines, not run together into a paragraph, and defaults in YAML's spelling, a flag's ``null`` included
    (one whose help says its own default keeps that)."""

    def _nested_parse_paragraph(self, text):
        return super()._nested_parse_paragraph(raw_text_as_rst(text))

    def run(self):
        items = super().run()
        command = " ".join(part for part in (self.options.get("prog", ""), str(self.options.get("path", ""))) if part)
        check_command_reference(self, command, items)
        return items

    def _print_action_groups(self, data, nested_content, markdown_help=False, settings=None, id_prefix=""):
        for group in data.get("action_groups", []):
            for entry in group["options"]:
                entry["help"] = plain_text_as_rst(entry.get("help") or "")
                choices_with_their_help(entry, data.get("children", ()))
                if entry["default"] != "==SUPPRESS==" and not (entry["default"] is None and _says_no_default(entry)):
                    entry["default"] = yaml_default(entry["default"])
        return super()._print_action_groups(data, nested_content, markdown_help, settings, id_prefix)


def setup(app):
    app.connect("doctree-read", link_source_files_to_modules, priority=100)  # before the downloads are collected
    app.connect("missing-reference", resolve_imported_name)
    app.connect("config-inited", names_with_a_page_of_their_own)  # before autosummary writes the module pages
    app.connect("autodoc-skip-member", leave_to_its_own_page, priority=400)  # before include_undocumented_code
    app.connect("autodoc-skip-member", include_undocumented_code)
    app.connect("viewcode-follow-imported", follow_names_within_the_package)
    app.add_directive("argparse", RawTextArgParseDirective, override=True)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
