"""The examples in the docstrings of the classes and functions users touch (the pages of docs/reference/api/)
run, and print what they show: each module's doctests pass under the standard doctest runner."""
import doctest
import importlib

import pytest

MODULES_WITH_EXAMPLES = [
    "basetrainer.engine.trainer",
    "basetrainer.engine.events",
    "basetrainer.engine.state",
    "basetrainer.config.mapping",
    "basetrainer.distributed.launch",
    "basetrainer.callbacks",
    "basetrainer.callbacks.early_stopping",
    "basetrainer.loggers.base",
    "basetrainer.loggers.history",
]


@pytest.mark.parametrize("name", MODULES_WITH_EXAMPLES)
def test_the_docstring_examples_of_the_module_run_as_shown(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # whatever an example writes stays out of the checkout
    results = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS, report=True)
    assert results.attempted > 0, f"{name} shows no example"
    assert results.failed == 0, f"{results.failed} of {name}'s examples did not print what they show"
