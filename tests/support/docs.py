"""The code blocks of the README and of the documentation pages, as the tests that check and run them read them.

A page is ``README.md`` or a Markdown file under ``docs/`` (``docs/_build`` and the generated
API pages aside). A block is a fenced code block; its language says what it is: ``python``
(a complete script), ``bash`` (commands), ``yaml`` (a config file), ``text`` (output or a
drawing, never run; so is a block without a language). ``{directive}`` fences are MyST
directives, not code.
"""
import ast
import dataclasses
import re
import shlex
from pathlib import Path

from . import REPO

DOCS = REPO / "docs"
LANGUAGES = ("python", "bash", "yaml", "text")
FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<text>.*?)^```$", re.DOTALL | re.MULTILINE)
OWN_TASK_PAGE = DOCS / "guides" / "own-task.md"  # its script is the my_task.py the other examples import


@dataclasses.dataclass(frozen=True)
class Block:
    page: Path
    line: int
    language: str
    text: str

    def __str__(self):
        return f"{self.page.relative_to(REPO)}:{self.line}"


def pages() -> list:
    generated = {DOCS / "_build", DOCS / "reference" / "generated"}
    return [REPO / "README.md", *sorted(page for page in DOCS.rglob("*.md")
                                        if not any(folder in page.parents for folder in generated))]


def code_blocks(language=None) -> list:
    """Every fenced block of every page (of ``language``, if given), directives left out."""
    blocks = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            info = match["info"].strip()
            if info.startswith("{"):
                continue
            block = Block(page, text.count("\n", 0, match.start()) + 1, info or "text", match["text"])
            if language is None or block.language == language:
                blocks.append(block)
    return blocks


def own_task_script() -> str:
    [block] = [block for block in code_blocks("python") if block.page == OWN_TASK_PAGE]
    return block.text


def shell_commands() -> list:
    """``(block, words)`` for every command of every bash block: continuation lines joined,
    comments dropped, ``a && b`` split in two."""
    return [(block, words) for block in code_blocks("bash")
            for line in block.text.replace("\\\n", " ").splitlines() for words in split_commands(line)]


def split_commands(line: str) -> list:
    """The commands of one shell line, as word lists: comments dropped, ``a && b`` split in two."""
    words, commands = shlex.split(line, comments=True), []
    while words:
        end = words.index("&&") if "&&" in words else len(words)
        commands.append(words[:end])
        words = words[end + 1:]
    return commands


def declared_extras_and_requirements():
    """setup.py's extras (EXTRAS' keys) and the names of its requirements, read from its source
    (the installed metadata may be an older checkout's)."""
    tree = ast.parse((REPO / "setup.py").read_text(encoding="utf-8"))
    extras, requirements = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "EXTRAS":
            extras |= {key.value for key in node.value.keys}
        if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == "EXTRAS":
            extras.add(node.slice.value)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value[:1].isalpha():
            requirements.add(node.value.split(">")[0].split("=")[0].split("<")[0].split("[")[0])
    return extras, requirements
