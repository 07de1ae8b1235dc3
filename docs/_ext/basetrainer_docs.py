"""Sphinx extensions of basetrainer's documentation."""
import importlib
import inspect
from pathlib import Path

from sphinx import addnodes


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


def setup(app):
    app.connect("doctree-read", link_source_files_to_modules, priority=100)  # before the downloads are collected
    app.connect("missing-reference", resolve_imported_name)
    app.connect("autodoc-skip-member", include_undocumented_code)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
