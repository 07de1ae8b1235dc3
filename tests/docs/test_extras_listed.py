"""The installing guide's table of extras, and the quick start's list of them, name every extra the package
declares (setup.py's extras_require, read from its source): ``all`` is "every extra
above" only while no extra is missing."""
import re

from support import REPO
from support.docs import declared_extras_and_requirements

GUIDES = REPO / "docs" / "guides"
NOT_FOR_USERS = {"docs", "test"}  # the site's build and the test suite: the table says so, the quick start does not
LEGACY = {"plots"}  # empty, kept for old install commands: the table says so


def declared_extras() -> set:
    return declared_extras_and_requirements()[0]


def test_the_installing_guides_table_names_every_extra_the_package_declares():
    page = (GUIDES / "installing.md").read_text(encoding="utf-8")
    table = page.split("## The extras", 1)[1].split("\n\n", 2)[1]
    rows = {name for line in table.splitlines() if line.startswith("| `")
            for name in re.findall(r"`([a-z]+)`", line.split("|")[1])}
    assert declared_extras() - rows == set()


def test_the_quick_starts_list_of_extras_names_every_extra_a_user_installs():
    page = (GUIDES / "quickstart.md").read_text(encoding="utf-8")
    paragraph = page.split("Optional features are extras", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"`([a-z]+)`", paragraph))
    assert declared_extras() - NOT_FOR_USERS - LEGACY - named == set()
