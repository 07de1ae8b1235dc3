"""Every old import path in basetrainer/old_paths.py's table: a moved module is the new module itself, a
renamed name is the new object, a removed module fails in one line naming what to use, and each old
path (but a removed one) warns once with a DeprecationWarning naming the new path."""
import importlib
import sys
import warnings

import pytest

from basetrainer import old_paths
from support.processes import run_python


@pytest.mark.parametrize("old, new", sorted(old_paths.MOVED.items()))
def test_a_moved_path_is_the_new_module_itself(old, new):
    assert importlib.import_module(old) is importlib.import_module(new)


def test_a_moved_package_takes_its_submodules_along_without_second_copies():
    import basetrainer.engine.strategies.fsdp as old
    import basetrainer.parallel.fsdp as new

    assert old is new and new.__spec__.name == "basetrainer.parallel.fsdp"
    assert sys.modules["basetrainer.engine.strategies.fsdp"] is new


@pytest.mark.parametrize("old", sorted(old_paths.NAMES))
def test_an_old_module_of_names_holds_the_objects_that_live_elsewhere_now(old):
    module = importlib.import_module(old)
    for name, where in old_paths.NAMES[old].items():
        owner, attribute = where.split(":")
        assert getattr(module, name) is getattr(importlib.import_module(owner), attribute)


@pytest.mark.parametrize("module, name", [(module, name) for module, names in sorted(old_paths.REMOVED_NAMES.items())
                                          for name in names])
def test_a_removed_name_fails_in_one_line_saying_what_to_use(module, name):
    with pytest.raises(ImportError, match=rf"^{module}\.{name} was removed: \S"):
        exec(f"from {module} import {name}", {})


@pytest.mark.parametrize("old", sorted(old_paths.REMOVED))
def test_a_removed_module_fails_in_one_line_saying_what_to_use(old):
    sys.modules.pop(old, None)
    with pytest.raises(ImportError, match=rf"^{old} was removed: \S") as raised:
        importlib.import_module(old)
    assert "\n" not in str(raised.value)


@pytest.mark.slow
def test_each_old_path_warns_once_at_the_line_that_imports_it(tmp_path):
    script = tmp_path / "old_script.py"
    script.write_text("\n".join(f"import {old}" for old in [*old_paths.MOVED, *old_paths.NAMES])
                      + "\nimport basetrainer.engine.comm\n")
    result = run_python(["-W", "default", script])
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "DeprecationWarning" in line]
    expected = [f"{script}:{number}: DeprecationWarning: {old} is an old import path: import " for number, old in
                enumerate([*old_paths.MOVED, *old_paths.NAMES], start=1)]
    assert len(lines) == len(expected)  # the last line imports an old path again: no second warning
    assert all(line.startswith(prefix) for line, prefix in zip(lines, expected)), lines


def test_an_old_path_warns_only_where_it_is_imported_from_user_code():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sys.modules.pop("basetrainer.engine.watchdog", None)
        importlib.import_module("basetrainer.engine.watchdog")
    assert [str(w.message) for w in caught] == [
        "basetrainer.engine.watchdog is an old import path: import basetrainer.distributed.watchdog instead"]
