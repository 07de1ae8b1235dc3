"""Sphinx configuration of basetrainer's documentation.

Build it with warnings as errors, links checked (-n)::

    pip install -e ".[docs]"
    python -m sphinx -W --keep-going -n -b html docs docs/_build/html

Nothing is fetched at build time: no intersphinx inventories, no remote images.
"""
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))  # the basetrainer of this checkout, installed or not
sys.path.insert(0, str(DOCS / "_ext"))

import basetrainer
import run_facts  # noqa: E402 (docs/_ext, put on the path above)

project = "basetrainer"
author = "the basetrainer authors"
copyright = "the basetrainer authors, Apache-2.0"
release = version = basetrainer.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinxarg.ext",
    "sphinx_copybutton",
    "basetrainer_docs",
    "basetrainer_checks",  # code lines wider than the box, links a reader cannot follow, flags the CLI reference omits
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]
templates_path = ["_templates"]

# MyST: heading anchors, so that [text](page.md#a-heading) links are checked too.
myst_heading_anchors = 3
# attrs_block: {.wide-output} before a block of a program's output whose lines may be wider than the code box
# (docs/_ext/basetrainer_checks.py).
myst_enable_extensions = ["attrs_block", "colon_fence", "deflist", "substitution"]

# The API reference: one page per module, generated from the docstrings.
autosummary_generate = True
autosummary_ignore_module_all = False  # a package's summary lists its __all__
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_inherit_docstrings = False  # a method without a docstring of its own shows none of torch's or dict's
autodoc_member_order = "bysource"
# basetrainer.hpo.optuna and basetrainer.integrations.ray_backend import their extras when imported; the docs extra
# does not install them.
autodoc_mock_imports = ["optuna", "ray"]
autodoc_typehints = "description"
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
add_module_names = False

# Where the project lives (basetrainer.__url__, which setup.py reads too): linked from every page, in the sidebar
# (_templates/sidebar/project-links.html, with the changelog) and in the footer, and given to pip on the installing
# page (an {only} repository block). Empty until the project has a public address: then none of them is there.
REPOSITORY = basetrainer.__url__
html_context = {"repository": REPOSITORY, "issues": f"{REPOSITORY}/issues" if REPOSITORY else ""}
# The figures that the guides quote from the runs they show, read from those runs' output (docs/_ext/run_facts.py).
myst_substitutions = {"pip_from_repository": f'`pip install "git+{REPOSITORY}"`', **run_facts.substitutions()}
if REPOSITORY:
    tags.add("repository")  # noqa: F821 (Sphinx gives conf.py its tags)

html_theme = "furo"
html_title = f"basetrainer {release}"
html_sidebars = {"**": ["sidebar/brand.html", "sidebar/search.html", "sidebar/scroll-start.html",
                        "sidebar/navigation.html", "sidebar/project-links.html", "sidebar/scroll-end.html"]}
html_theme_options = {
    "footer_icons": [{"name": "Repository", "url": REPOSITORY, "html": "Repository", "class": "footer-link"},
                     {"name": "Issues", "url": f"{REPOSITORY}/issues", "html": "Issues", "class": "footer-link"}]
    if REPOSITORY else [],
}
# The copy button copies commands without their prompt ($, >>>, ...) or the output shown after them;
# a block without prompts is copied whole.
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
html_static_path = ["_static"]
html_css_files = ["basetrainer.css"]
html_show_sourcelink = False
pygments_style = "friendly"
smartquotes = False  # flags keep their "--" and quotes as typed, in prose as in --help

nitpicky = True
# Targets that no page documents and that the build cannot fetch (no intersphinx at build time):
# names of Python, torch and other libraries that annotations and docstrings mention.
nitpick_ignore_regex = [
    ("py:.*", (r"(torch|torchvision|numpy|optuna|nni|mlflow|wandb|onnx|onnxruntime|argparse|logging|pathlib|typing"
               r"|collections|contextlib|dataclasses|enum|os|io|threading|concurrent|tqdm|matplotlib|PIL"
               r"|weakref|types|abc|yaml|importlib|torchmetrics|timm|ray)(\..*)?")),
    ("py:class", (r"(int|float|str|bool|bytes|dict|list|tuple|set|object|callable|type|None|Path|Any|Optional"
                  r"|Callable|Iterable|Iterator|Sequence|Mapping|Union)")),
    ("py:exc", (r"(ValueError|TypeError|KeyError|RuntimeError|OSError|ImportError|SystemExit|KeyboardInterrupt"
                r"|AssertionError|AttributeError|FileNotFoundError|NotImplementedError|BaseException|Exception)")),
]
