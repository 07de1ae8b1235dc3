"""The layering rules of docs/ARCHITECTURE.md, checked on the source."""
import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "basetrainer"
# The layers above the engine: the engine owns the event protocol, they build on it.
ABOVE_THE_ENGINE = ("callbacks", "metric", "tasks", "pruning", "models", "scheduler", "loggers", "export", "hpo")
# The earlier library's ONNXEngine lived in engine/: that path stays, as a thin layer over export/.
OLD_IMPORT_PATHS = {"engine/onnx_engine.py"}
MAX_MODULE_LINES = 350


def imported_packages(path: pathlib.Path):
    """The first component under basetrainer/ of every module ``path`` imports (relative or absolute)."""
    module_parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # from ..x import y: resolve against this module's package
                base = module_parts[: len(module_parts) - node.level]
                target = [*base, *(node.module.split(".") if node.module else [])]
            else:
                target = (node.module or "").split(".")
            names = [target] if len(target) > 1 else [[*target, alias.name] for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name.split(".") for alias in node.names]
        else:
            continue
        for parts in names:
            if parts[0] == "basetrainer" and len(parts) > 1:
                yield parts[1]


ENGINE_MODULES = sorted(p for p in (PACKAGE / "engine").rglob("*.py")
                        if str(p.relative_to(PACKAGE)) not in OLD_IMPORT_PATHS)


@pytest.mark.parametrize("path", ENGINE_MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_engine_imports_nothing_from_the_layers_above_it(path):
    assert not [name for name in imported_packages(path) if name in ABOVE_THE_ENGINE]


def test_the_import_rule_sees_relative_and_absolute_imports():
    module = PACKAGE / "checkpoint" / "files.py"  # from ..errors import ..., from ..utils.file_utils import ...
    assert {"errors", "utils"} <= set(imported_packages(module))


def test_no_module_is_longer_than_the_limit():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}
