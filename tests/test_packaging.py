"""What the installed distribution declares: the core dependencies and the extras."""
import pytest

from support.packaging import names


def test_the_pictures_need_no_extra():
    assert "matplotlib" in names()


@pytest.mark.parametrize("extra, package", [("onnx", "onnxruntime"), ("prune", "torch-pruning")])
def test_each_optional_feature_is_an_extra(extra, package):
    assert package in names(extra) and package not in names()
