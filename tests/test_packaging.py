"""What the installed distribution declares: the core dependencies and the extras."""
from importlib.metadata import requires

import pytest


def requirements():
    return requires("basetrainer") or []


def names(extra=None):
    marker = f'extra == "{extra}"' if extra else None
    picked = [r for r in requirements() if (marker in r if marker else "extra ==" not in r)]
    return {r.split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower() for r in picked}


def test_the_pictures_need_no_extra():
    assert "matplotlib" in names()


@pytest.mark.parametrize("extra, package", [("onnx", "onnxruntime"), ("prune", "torch-pruning")])
def test_each_optional_feature_is_an_extra(extra, package):
    assert package in names(extra) and package not in names()
