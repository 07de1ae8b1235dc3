"""The README is read on its own (on GitHub, on PyPI), outside the documentation build that checks
the site's links: its links into the repository must lead somewhere."""
import re

import pytest

from support import REPO

LINKS = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", (REPO / "README.md").read_text(encoding="utf-8"))


def test_the_readme_links_to_the_guides():
    assert sum(link.startswith("docs/guides/") for link in LINKS) >= 10


@pytest.mark.parametrize("link", [link for link in LINKS if "://" not in link])
def test_every_link_of_the_readme_into_the_repository_leads_to_a_file(link):
    assert (REPO / link).exists()
