"""The layering rules of docs/ARCHITECTURE.md, checked on the source: each layer imports only the layers
below it, no modules import each other round a circle (inside a layer, where the first rule cannot see it), the
building blocks take from the engine its event protocol and run state only, nothing imports an old path, no module outgrows one job, and a process that trains on one device or with DDP does
not import what only FSDP, a mesh or a pipeline needs."""
import ast
import pathlib

import pytest

from basetrainer import old_paths
from support.processes import run_python

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "basetrainer"
TESTS = pathlib.Path(__file__).resolve().parent

# Bottom to top; a package may import its own layer and those below it.
LAYERS = [
    {"__init__", "__version__", "errors", "old_paths", "utils", "config"},  # foundations
    {"distributed"},  # processes: launching, process groups, collectives, signals, the watchdog
    {"parallel"},  # strategies: how a model is spread over devices
    {"checkpoint", "data"},  # checkpoint files and the manager; samplers, loaders, datasets
    {"fault_tolerance"},  # replica groups through torchft: quorum, commit, the data they deal, healing, DiLoCo
    {"engine"},  # the loop, its events and state
    {"callbacks", "metric", "loggers", "scheduler", "criterion", "optimizer", "models", "pruning", "export"},
    {"tasks", "hpo", "tuning", "study", "integrations", "cli", "__main__"},  # applications
]
BUILDING_BLOCKS = LAYERS[6]
ENGINE_PROTOCOL = {"engine.events", "engine.state"}  # what the building blocks may take from the engine
MAX_MODULE_LINES = 350


def layer_of(package: str) -> int:
    return next(index for index, members in enumerate(LAYERS) if package in members)


def imported_modules(path: pathlib.Path):
    """The dotted names under basetrainer/ of every module ``path`` imports (relative or absolute)."""
    module_parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # from ..x import y: resolve against this module's package
                base = module_parts[: len(module_parts) - node.level]
                target = [*base, *(node.module.split(".") if node.module else [])]
            else:
                target = (node.module or "").split(".")
            names = [[*target, alias.name] for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name.split(".") for alias in node.names]
        else:
            continue
        for parts in names:
            if parts[0] == "basetrainer" and len(parts) > 1:
                yield ".".join(parts)


def package_of(path: pathlib.Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_each_module_imports_only_its_own_layer_and_those_below(path):
    own = package_of(path)
    above = sorted({name for name in imported_modules(path)
                    if layer_of(name.split(".")[1]) > layer_of(own)})
    assert above == []


def module_name(path: pathlib.Path) -> str:
    """``basetrainer.distributed.launch`` for its file; a package's ``__init__.py`` is the package."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict:
    """Each module of basetrainer (by :func:`module_name`) and the modules of basetrainer it imports, read from the
    source: imports inside functions count (a circle that one of them closes is still a circle)."""
    names = {module_name(path): path for path in MODULES}

    def module_of(name):  # basetrainer.errors.ConfigError -> basetrainer.errors
        parts = name.split(".")
        return next((".".join(parts[:end]) for end in range(len(parts), 0, -1) if ".".join(parts[:end]) in names),
                    None)

    return {module: {module_of(name) for name in imported_modules(path)} - {module, None}
            for module, path in names.items()}


def import_circles(graph: dict) -> list:
    """The groups of modules that import each other round a circle (Tarjan's strongly connected components of more
    than one module), each sorted."""
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return circles


def test_no_modules_import_each_other_round_a_circle():
    assert import_circles(import_graph()) == []


def test_the_circle_rule_finds_a_circle_of_three_and_a_deferred_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circles(graph) == [["a", "b", "c"]]
    launch = PACKAGE / "distributed" / "launch.py"  # launch() runs the replica groups' supervisor
    assert "basetrainer.distributed.replica_groups" in import_graph()["basetrainer.distributed.launch"]
    assert module_name(launch) == "basetrainer.distributed.launch"


@pytest.mark.parametrize("path", [p for p in MODULES if package_of(p) in BUILDING_BLOCKS],
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_building_blocks_take_from_the_engine_its_event_protocol_and_run_state_only(path):
    taken = {".".join(name.split(".")[1:3]) for name in imported_modules(path) if name.split(".")[1] == "engine"}
    assert taken <= ENGINE_PROTOCOL


@pytest.mark.parametrize("path", [*MODULES, *(p for p in TESTS.rglob("*.py") if "compat" not in p.parts)],
                         ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_nothing_outside_tests_compat_imports_an_old_path(path):
    names = imported_modules(path) if path.is_relative_to(PACKAGE) else _absolute_imports(path)
    assert [name for name in names if any(old_paths.is_old_path(prefix) for prefix in _prefixes(name))] == []


def test_the_import_rule_sees_relative_and_absolute_imports():
    module = PACKAGE / "checkpoint" / "files.py"  # from ..errors import ..., from ..utils.file_utils import ...
    assert {"basetrainer.errors.CheckpointError", "basetrainer.utils.file_utils.atomic_write"} <= set(
        imported_modules(module))


def test_every_package_has_a_layer():
    packages = {package_of(path) for path in MODULES}
    assert sorted(package for package in packages if not any(package in layer for layer in LAYERS)) == []


def test_no_two_test_files_share_a_name():
    # The test folders are not packages: pytest imports each test file by its name alone, so a second file of the
    # same name in another folder is an "import file mismatch" error in a run of the whole suite.
    names = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        names.setdefault(path.name, []).append(str(path.relative_to(TESTS)))
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}


def test_no_module_is_longer_than_the_limit():
    long = {str(p.relative_to(PACKAGE)): n for p in MODULES
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}


# Imported only by FSDP, a device mesh, a pipeline, sharded checkpoints or compile: together about two seconds of
# every process's start (torch._dynamo alone is most of it).
HEAVY_MODULES = ("torch._dynamo", "torch.distributed.fsdp", "torch.distributed.tensor", "torch.distributed.pipelining",
                 "torch.distributed.checkpoint")


@pytest.mark.slow
def test_the_engine_callbacks_data_and_launch_import_none_of_what_only_fsdp_a_mesh_or_a_pipeline_needs():
    code = ("import sys, basetrainer.engine.trainer, basetrainer.callbacks, basetrainer.checkpoint.manager, "
            "basetrainer.distributed.launch, basetrainer.data, basetrainer.metric, basetrainer.parallel; "
            f"print(sorted(name for name in {HEAVY_MODULES!r} if name in sys.modules))")
    result = run_python(["-c", code], check=True, fresh=True)
    assert result.stdout.strip() == "[]"


def _absolute_imports(path: pathlib.Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def _prefixes(name: str):
    parts = name.split(".")
    return [".".join(parts[:end]) for end in range(2, len(parts) + 1)]
