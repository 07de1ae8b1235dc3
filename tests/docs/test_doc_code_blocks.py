"""Every code block of the README and the documentation, checked without running it: each shell
command parses as its program would parse it, each config file is a valid config, each Python
script compiles and imports names that exist. tests/e2e/test_doc_examples.py runs the scripts."""
import ast
import importlib
import importlib.util
import re
import shlex

import pytest
import yaml

from basetrainer import cli, old_paths
from basetrainer.data.images import photo_digits
from basetrainer.distributed.replica_groups import GROUP_VARIABLE
from basetrainer.hpo.classification import trial_config
from basetrainer.tasks.classification import parse_config
from basetrainer.tasks.detection import predict as detection_predict
from basetrainer.tasks.detection.config import parse_config as parse_detection_config
from basetrainer.tasks.text.config import parse_config as parse_text_config
from support import EXAMPLES, REPO
from support.docs import LANGUAGES, code_blocks, declared_extras_and_requirements, shell_commands, split_commands

CI_SCRIPT = REPO / ".ci" / "run"
ENVIRONMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")  # a variable's assignment before a command
E2E_OWN_TASK_RUNS = ([], ["--distributed", "--gpu_id", "0", "1"])  # the arguments the e2e test runs my_task.py with


def example_module(name):
    spec = importlib.util.spec_from_file_location(f"{name}_example", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_pip(words):
    extras, requirements = declared_extras_and_requirements()
    packages = [word for word in words[2:] if not word.startswith("-") and not word.startswith("https://")]
    for package in packages:
        if package.startswith("."):  # -e ".[onnx]"
            wanted = package.partition("[")[2].rstrip("]")
            assert set(filter(None, wanted.split(","))) <= extras, f"no such extra in setup.py: {package}"
        else:
            assert package in requirements, f"{package} is no requirement of setup.py"


def check_example(argv):
    parse_config(argv)  # no exception: every flag and key=value exists and has the right type


def check_detection(argv):
    parse_detection_config(argv)


def check_text(argv):
    parse_text_config(argv)


def check_text_example(argv):
    parse_text_config([*example_module("finetune_text").EXAMPLE, *argv])


def check_basetrainer(argv):
    if argv[:1] == ["train"]:
        task, arguments = cli.train_task(argv[1:])
        _, _, arguments = cli.ray_arguments(arguments)  # --ray N [--ray_max_failures K]: the command's own
        return {"detection": check_detection, "text": check_text}.get(task, check_example)(arguments)
    if argv[:1] == ["predict"] and cli.train_task(argv[1:])[0] == "detection":
        return detection_predict.get_parser().parse_args(cli.train_task(argv[1:])[1])
    if argv[:1] and argv[0] in cli.TOOLS:  # lr-find, batch-find, study: each command's own parser
        return importlib.import_module(cli.TOOL_MODULES[argv[0]]).get_parser().parse_args(argv[1:])
    cli.get_parser().parse_args(argv)


def check_hpo(argv):
    _, task_argv = example_module("hpo").get_parser().parse_known_args(argv)
    parse_config(task_argv)


def check_language_model(argv):
    example_module("language_model").read_config(argv)  # no exception: every flag and key=value exists


def check_own_task(argv):
    assert argv in E2E_OWN_TASK_RUNS, f"tests/e2e/test_doc_examples.py runs my_task.py only with {E2E_OWN_TASK_RUNS}"


def check_pytest(argv):
    """Every path named exists; the whole suite (no path, no -m or -k) is run as CI runs it."""
    assert all((REPO / word).exists() for word in argv if not word.startswith("-") and "/" in word)
    if not any(word in ("-m", "-k") or "/" in word for word in argv):
        ci_runs = [command[3:] for command in ci_commands() if command[:3] == ["python", "-m", "pytest"]]
        assert argv in ci_runs, f".ci/run does not run the suite with {shlex.join(argv)}"


def check_sphinx(argv):
    """The documented build is the one CI runs (there with -q: quiet when it builds cleanly)."""
    ci_builds = [[word for word in command[3:] if word != "-q"] for command in ci_commands()
                 if command[:3] == ["python", "-m", "sphinx"]]
    assert argv in ci_builds, f".ci/run does not build the docs with {shlex.join(argv)}"


def ci_commands():
    return [words for line in CI_SCRIPT.read_text(encoding="utf-8").splitlines() for words in split_commands(line)]


def check_kill(argv):
    """Killing a replica group by hand: its processes are found by the variable the supervisor sets in each."""
    assert any(word.startswith(f"{GROUP_VARIABLE}=") for word in argv), f"finds no process by {GROUP_VARIABLE}"


def check_photo_digits(argv):
    photo_digits.get_parser().parse_args(argv)


def check_tensorboard(argv):
    assert argv[:1] == ["--logdir"] and importlib.util.find_spec("tensorboard") is not None


def check_export(argv):
    """``export NAME=value ...``: each word a variable's assignment."""
    assert argv and all(ENVIRONMENT.match(word) for word in argv), argv


def check_lighthouse(argv):
    """torchft's lighthouse: each flag one of its server's parameters (the command and the Python binding share
    them), each with a value."""
    from torchft._torchft import LighthouseServer

    parameters = set(re.findall(r"\w+", LighthouseServer.__text_signature__)) - {"None"}
    flags = argv[::2]
    assert all(flag.startswith("--") and flag[2:] in parameters for flag in flags) and len(argv) % 2 == 0, argv
    assert {"bind", "min_replicas"} <= {flag[2:] for flag in flags}, argv


def check_ray(argv):
    """``ray start ...``, parsed by Ray's own command line (click), nothing run."""
    from ray.scripts.scripts import cli as ray_cli

    command = ray_cli.get_command(None, argv[0])
    assert command is not None, argv
    command.make_context(argv[0], list(argv[1:]))


def checker(words):
    """The check of one command, and its arguments; None for a command no check knows. Variables set before a
    command (``NAME=value command ...``) and a ``&`` at its end are the shell's."""
    while words and ENVIRONMENT.match(words[0]) and len(words) > 1:
        words = words[1:]
    if words[-1:] == ["&"]:
        words = words[:-1]
    if words[:1] in (["srun"], ["torchrun"]):  # the program they start, after their own flags
        start = next((i for i, word in enumerate(words) if word.endswith(".py")), None)
        return checker(["python", *words[start:]]) if start is not None and words[0] == "torchrun" else \
            checker(words[1:])
    programs = {("pip", "install"): check_pip, ("python", "examples/example.py"): check_example,
                ("python", "examples/hpo.py"): check_hpo, ("python", "my_task.py"): check_own_task,
                ("python", "examples/detection.py"): check_detection,
                ("python", "examples/finetune_text.py"): check_text_example,
                ("python", "examples/language_model.py"): check_language_model,
                ("python", "-m"): None, ("basetrainer",): check_basetrainer, ("tensorboard",): check_tensorboard,
                ("kill",): check_kill, ("export",): check_export, ("torchft_lighthouse",): check_lighthouse,
                ("ray",): check_ray}
    if words[:3] == ["python", "-m", "pytest"]:
        return check_pytest, words[3:]
    if words[:3] == ["python", "-m", "sphinx"]:
        return check_sphinx, words[3:]
    if words[:3] == ["python", "-m", "basetrainer.data.images.photo_digits"]:
        return check_photo_digits, words[3:]
    for prefix, check in programs.items():
        if tuple(words[:len(prefix)]) == prefix and check is not None:
            return (check_pip, words) if check is check_pip else (check, words[len(prefix):])
    return None


COMMANDS = shell_commands()


def test_every_code_block_has_a_language_the_tests_know():
    assert [str(block) for block in code_blocks() if block.language not in LANGUAGES] == []


def test_the_docs_show_commands_of_the_example_and_of_the_basetrainer_command():
    programs = {tuple(words[:2]) for _, words in COMMANDS}
    assert {("python", "examples/example.py"), ("basetrainer", "train"), ("basetrainer", "export"),
            ("basetrainer", "predict")} <= programs


@pytest.mark.parametrize("block, words", COMMANDS, ids=[f"{block}:{shlex.join(words)[:60]}" for block, words in COMMANDS])
def test_every_shell_command_of_the_docs_is_valid(block, words):
    found = checker(words)
    assert found is not None, f"{block}: no check knows `{shlex.join(words)}`: add one to this file"
    check, argv = found
    check(argv)


@pytest.mark.parametrize("block", code_blocks("python"), ids=str)
def test_every_python_example_compiles(block):
    compile(block.text, str(block), "exec")


def imported_names(block):
    for node in ast.walk(ast.parse(block.text)):
        if isinstance(node, ast.ImportFrom) and node.module.startswith("basetrainer"):
            yield node.module, [alias.name for alias in node.names]


@pytest.mark.parametrize("block", code_blocks("python"), ids=str)
def test_every_name_a_python_example_imports_from_basetrainer_exists(block):
    for module, names in imported_names(block):
        if old_paths.is_old_path(module):
            continue  # the page on the earlier library shows them; its e2e run imports them
        missing = [name for name in names if not hasattr(importlib.import_module(module), name)]
        assert missing == [], f"{block}: {module} has no {missing}"


def yaml_blocks():
    return code_blocks("yaml")


@pytest.mark.parametrize("block", [b for b in yaml_blocks() if "trialCommand" not in b.text], ids=str)
def test_every_config_file_of_the_docs_is_a_valid_config(block, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(block.text)
    parse_config(["-c", str(config)])


@pytest.mark.parametrize("block", [b for b in yaml_blocks() if "trialCommand" in b.text], ids=str)
def test_every_nni_experiment_of_the_docs_runs_trials_of_valid_configs(block):
    experiment = yaml.safe_load(block.text)
    words = shlex.split(experiment["trialCommand"])
    assert words[:3] == ["python", "-m", "basetrainer.hpo.nni"]
    first_values = {key: space["_value"][0] for key, space in experiment["searchSpace"].items()}
    cfg = trial_config(words[3:], first_values, "trial_0")
    assert {key: cfg[key] for key in first_values} == first_values
