"""The site's way out to the project (docs/_templates/sidebar/project-links.html): the changelog always, the
repository and its issues only once the project has a public address (``basetrainer.__url__``), so that no page
sends a reader, or a bug report, to another project."""
import jinja2

from support import REPO

TEMPLATE = (REPO / "docs" / "_templates" / "sidebar" / "project-links.html").read_text(encoding="utf-8")


def sidebar(repository: str) -> str:
    return jinja2.Environment().from_string(TEMPLATE).render(
        repository=repository, issues=f"{repository}/issues" if repository else "", pathto=lambda page: f"{page}.html")


def test_without_a_public_address_the_sidebar_links_only_to_the_changelog():
    page = sidebar("")
    assert 'href="changelog.html"' in page and "Repository" not in page and "Issues" not in page


def test_the_public_address_puts_the_repository_and_its_issues_in_the_sidebar():
    page = sidebar("https://example.org/basetrainer")
    assert 'href="https://example.org/basetrainer">Repository' in page
    assert 'href="https://example.org/basetrainer/issues">Issues' in page
