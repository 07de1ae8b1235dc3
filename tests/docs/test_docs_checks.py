"""The documentation build's own checks (docs/_ext/basetrainer_checks.py), each on a small site that has the
defect: a code line wider than the code box, a link a reader cannot follow, a command-line reference that
leaves out flags. The build of such a site warns, which under -W fails it; the same site without the defect
builds clean."""
import io
import re
import sys

import furo
from sphinx.testing import util as sphinx_testing

from support import REPO

EXTENSIONS = REPO / "docs" / "_ext"
sys.path.insert(0, str(EXTENSIONS))
import basetrainer_checks  # noqa: E402  (docs/_ext is no package: the build puts it on the path as conf.py does)

CONF = """
import sys
sys.path.insert(0, {extensions!r})
extensions = ["myst_parser", "sphinx.ext.viewcode", "sphinxarg.ext", "basetrainer_docs", "basetrainer_checks"]
myst_enable_extensions = ["attrs_block"]
"""


def build(tmp_path, **pages) -> str:
    """Builds a site of ``pages`` (name -> Markdown or, for ``*.rst``, reStructuredText) to HTML; returns what
    it warned."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "conf.py").write_text(CONF.format(extensions=str(EXTENSIONS)), encoding="utf-8")
    names = [name.partition(".")[0] for name in pages]
    (source / "index.md").write_text("# Site\n\n```{toctree}\n" + "\n".join(names) + "\n```\n", encoding="utf-8")
    for name, text in pages.items():
        (source / (name if "." in name else f"{name}.md")).write_text(text, encoding="utf-8")
    warnings = io.StringIO()
    # Sphinx's own test application: each build in this process starts from a clean state of Sphinx and docutils
    app = sphinx_testing.SphinxTestApp("html", srcdir=source, builddir=tmp_path / "build", status=io.StringIO(),
                                       warning=warnings, freshenv=True)
    try:
        app.build()
    finally:
        app.cleanup()
    return warnings.getvalue()


def our_warnings(warned: str) -> list:
    """The lines of ``warned`` that the checks wrote (``[basetrainer.code-width]``, ...)."""
    return [line for line in warned.splitlines() if "[basetrainer." in line]


def fence(language, *lines, attributes=""):
    return "\n".join([*([attributes] if attributes else []), f"```{language}", *lines, "```", ""])


# ------------------------------------------------------------------ code lines
def test_a_code_line_wider_than_the_code_box_is_a_warning(tmp_path):
    command = "basetrainer train " + "x" * (basetrainer_checks.CODE_COLUMNS - len("basetrainer train ") + 1)
    warned = build(tmp_path, page="# Page\n\n" + fence("bash", "basetrainer --version", command))
    assert "page.md:3: WARNING: code line 2 of a block is 101 characters wide, over the 100" in warned


def test_a_code_line_as_wide_as_the_code_box_is_no_warning(tmp_path):
    line = "y" * basetrainer_checks.CODE_COLUMNS
    assert our_warnings(build(tmp_path, page="# Page\n\n" + fence("python", line))) == []


def test_a_wide_line_of_program_output_is_no_warning_when_its_block_says_so(tmp_path):
    output = "epoch 1/2 " + "z" * 200
    assert our_warnings(build(tmp_path, page="# Page\n\n" + fence("text", output, attributes="{.wide-output}"))) == []


def test_the_code_box_holds_the_columns_the_check_allows_at_1280_pixels():
    """From the site's CSS: the text column's width at 1280 px, furo's padding of a code box and its code font,
    at 0.6em a character (the widest of the common monospace fonts)."""
    css = (REPO / "docs" / "_static" / "basetrainer.css").read_text(encoding="utf-8")
    wide_screen = re.search(r"@media \(min-width: ([\d.]+)em\) \{\s*\.content \{\s*width: ([\d.]+)em;", css)
    font_size = float(re.search(r"--code-font-size: ([\d.]+)%", css).group(1)) / 100
    with open(furo.__file__.rpartition("/")[0] + "/theme/furo/static/styles/furo.css", encoding="utf-8") as stream:
        padding = re.search(r"\.highlight pre,pre\.literal-block\{[^}]*padding:[\d.]+rem ([\d.]+)rem", stream.read())
    assert float(wide_screen.group(1)) * 16 <= 1280
    box = float(wide_screen.group(2)) * 16 - 2 * float(padding.group(1)) * 16
    assert box / (0.6 * 16 * font_size) >= basetrainer_checks.CODE_COLUMNS


# ------------------------------------------------------------------ links
def test_text_with_an_at_sign_read_as_an_e_mail_address_is_a_warning(tmp_path):
    warned = build(tmp_path, **{"page.rst": "Page\n====\n\nThe test mAP@0.5 rose.\n"})
    assert "page.html links to 'mailto:mAP%400.5': an e-mail link" in warned


def test_an_address_read_as_a_link_of_another_scheme_is_a_warning(tmp_path):
    warned = build(tmp_path, **{"page.rst": "Page\n====\n\nrendezvous: tcp://<host>:<port>\n"})
    assert "page.html links to 'tcp:/': a tcp: link" in warned


def test_links_to_pages_and_to_web_sites_are_no_warning(tmp_path):
    page = "# Page\n\n[PyTorch](https://pytorch.org/docs), [the site](index.md), `mAP@0.5` as code.\n"
    assert our_warnings(build(tmp_path, page=page)) == []


# ------------------------------------------------------------------ the command-line reference
def argparse_directive(func, prog, module="basetrainer.cli"):
    return f"```{{eval-rst}}\n.. argparse::\n   :module: {module}\n   :func: {func}\n   :prog: {prog}\n```\n"


def test_a_reference_that_leaves_out_flags_of_the_command_s_help_is_a_warning(tmp_path):
    """The task's own parser lacks the flags the train command takes itself: --task, --ray, --ray_max_failures."""
    page = "# CLI\n\n" + argparse_directive("get_parser", "basetrainer train", "basetrainer.tasks.classification.config")
    warned = build(tmp_path, cli=page)
    assert "the reference of 'basetrainer train' leaves out --ray, --ray_max_failures, --task" in warned


def test_a_command_without_a_section_is_a_warning(tmp_path):
    warned = build(tmp_path, cli="# CLI\n\n" + argparse_directive("train_parser", "basetrainer train"))
    assert "the reference of" not in warned
    assert "the command-line reference has no section for 'basetrainer study' (its pages: cli)" in warned


def test_the_choices_of_a_command_show_with_their_help(tmp_path):
    build(tmp_path, cli="# CLI\n\n" + argparse_directive("get_parser", "basetrainer")
          .replace(":prog: basetrainer", ":prog: basetrainer\n   :nosubcommands:"))
    page = (tmp_path / "build" / "html" / "cli.html").read_text(encoding="utf-8")
    assert re.search(r"<code[^>]*><span class=\"pre\">lr-find</span></code>: the learning-rate range test", page)
