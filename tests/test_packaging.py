"""What the installed distribution declares: the core dependencies and the extras."""
import pytest

from support import REPO
from support.packaging import names


def test_the_pictures_need_no_extra():
    assert "matplotlib" in names()


@pytest.mark.parametrize("extra, package", [("onnx", "onnxruntime"), ("prune", "torch-pruning")])
def test_each_optional_feature_is_an_extra(extra, package):
    assert package in names(extra) and package not in names()


def setup_metadata(tmp_path, url: str):
    """setup.py's metadata for a checkout whose ``basetrainer.__url__`` is ``url`` (a copy of setup.py, the README
    and the package's __init__ with that address, read as pip reads them)."""
    from distutils.core import run_setup  # setuptools' own, which setup.py is written for

    (tmp_path / "basetrainer").mkdir()
    package = (REPO / "basetrainer" / "__init__.py").read_text(encoding="utf-8")
    (tmp_path / "basetrainer" / "__init__.py").write_text(package.replace('__url__ = ""', f'__url__ = "{url}"'))
    for name in ("setup.py", "README.md"):
        (tmp_path / name).write_text((REPO / name).read_text(encoding="utf-8"), encoding="utf-8")
    return run_setup(str(tmp_path / "setup.py"), stop_after="init").metadata


def test_without_a_public_address_the_package_links_to_no_project(tmp_path):
    metadata = setup_metadata(tmp_path, "")
    assert metadata.url is None and not metadata.project_urls


def test_the_public_address_gives_the_package_its_source_and_issues_links(tmp_path):
    metadata = setup_metadata(tmp_path, "https://example.org/basetrainer")
    assert metadata.url == "https://example.org/basetrainer"
    assert metadata.project_urls == {"Source": "https://example.org/basetrainer",
                                     "Issues": "https://example.org/basetrainer/issues"}
