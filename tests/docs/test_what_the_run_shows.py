"""The quick start's log as the documentation shows it (docs/_generated/quickstart/log.txt, copied from a real
run by docs/_scripts/what_the_run_shows.py) has the shapes of the lines the code prints now.

A line's shape is its text with every number written N. A shown line must have the logger's layout, and its
message must be a step, epoch or closing line as :mod:`basetrainer.callbacks.log_lines` writes them today, or
match a message that a ``logger.info``/``logger.warning`` call of the package writes. When this fails, the
code's lines changed: run ``python docs/_scripts/what_the_run_shows.py`` and commit what it writes.
"""
import ast
import logging
import re
import sys
from types import SimpleNamespace

from basetrainer.callbacks.log_lines import epoch_line, run_line, step_line
from basetrainer.utils.log import set_logger
from support import REPO

sys.path.insert(0, str(REPO / "docs" / "_ext"))
import run_facts  # noqa: E402  (docs/_ext is no package: conf.py puts it on the path so)

SHOWN_LOG = REPO / "docs" / "_generated" / "quickstart" / "log.txt"
GUIDES = REPO / "docs" / "guides"
SUBSTITUTION = re.compile(r"\{\{\s*(\w+)\s*\}\}")
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")
FORMAT_SPEC = re.compile(r"%(?:\.\d+)?[sdfg]")


def shape(text: str) -> str:
    return NUMBER.sub("N", text)


def line_layout() -> str:
    """The shape of what the basetrainer logger writes before a message, e.g. ``N-N-N N:N:N INFO ``."""
    [handler] = set_logger(level="info").handlers
    record = logging.LogRecord("basetrainer", logging.INFO, __file__, 1, "MESSAGE", None, None)
    return shape(handler.format(record)).removesuffix("MESSAGE")


def lines_the_loop_writes() -> dict:
    """The step, epoch and closing lines of a CPU run of the example, written now by the functions LogHistory
    uses (the numbers are made up; the fields are those a CPU run has: memory and FLOP/s, no MFU)."""
    state = SimpleNamespace(max_steps=None, epoch=0, max_epochs=2, batches_per_epoch=22, global_step=20)
    scalars = {"train/loss_step": 1.5261, "train/lr": 0.02166, "train/samples_per_s": 38.0,
               "train/data_wait": 0.03, "train/peak_memory_gib": 0.89, "train/flops_per_s": 8.48e9}
    record = {"epoch": 1, "lr": 0.02389, "train": {"Acc": 52.273, "loss": 1.4304},
              "test": {"Acc": 10.028, "loss": 106.43}}
    rates = {"whole_run_samples_per_s": 34.0, "steady_samples_per_s": 30.0}
    return {"step": shape(step_line(state, 19, scalars, eta=40.0)),
            "epoch": shape(epoch_line(record, 39.0, max_epochs=2)),
            "closing": shape(run_line(2816, 84.0, rates, steady_after=10))}


def logged_message_patterns() -> list:
    """A pattern for the first line of each message that a ``.info(...)`` or ``.warning(...)`` call with a literal
    format writes (formats of fewer than 3 letters of their own, as ``"%s; %s"``, would match anything and are left out)."""
    patterns = []
    sources = [path.read_text(encoding="utf-8") for path in (REPO / "basetrainer").rglob("*.py")]
    for source in (source for source in sources if ".info(" in source or ".warning(" in source):
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("info", "warning") and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                continue
            text = node.args[0].value.split("\n")[0]  # a message of several lines is shown by its first
            pieces = [piece.replace("%%", "%") for piece in FORMAT_SPEC.split(text)]  # "%.0f%%" writes "45%"
            if sum(char.isalpha() for char in "".join(pieces)) < 3:
                continue
            specs = FORMAT_SPEC.findall(text)
            pattern = re.escape(shape(pieces[0]))
            for spec, piece in zip(specs, pieces[1:]):
                pattern += (".*" if spec.endswith("s") else "N") + re.escape(shape(piece))
            patterns.append(re.compile(pattern))
    return patterns


def shown_messages() -> list:
    """The messages of the shown log's lines (the lines that continue a message, as a report's, aside)."""
    layout = line_layout()
    return [shape(line)[len(layout):] for line in SHOWN_LOG.read_text(encoding="utf-8").splitlines()
            if shape(line).startswith(layout)]


def test_the_shown_log_has_a_step_line_an_epoch_line_and_the_closing_line_as_the_code_writes_them_now():
    messages = shown_messages()
    for kind, line in lines_the_loop_writes().items():
        assert line in messages, f"no {kind} line of today's shape in {SHOWN_LOG.name}: {line}"


def test_every_line_of_the_shown_log_is_one_the_code_writes_now():
    loop_lines = set(lines_the_loop_writes().values())
    patterns = logged_message_patterns()
    messages = shown_messages()
    assert len(messages) >= 8
    unknown = [message for message in messages
               if message not in loop_lines and not any(pattern.fullmatch(message) for pattern in patterns)]
    assert unknown == [], "run python docs/_scripts/what_the_run_shows.py: the code no longer writes these lines"


def what_the_run_shows_list() -> str:
    """The quick start's list that describes the shown log (between the log and the list of files)."""
    page = (GUIDES / "quickstart.md").read_text(encoding="utf-8")
    section = page.split("## What the run shows", 1)[1]
    return section.split("```", 2)[2].split("The files it wrote", 1)[0]


def test_every_figure_the_prose_quotes_from_a_shown_run_is_read_from_that_run():
    substitutions = run_facts.substitutions()
    used = {name for page in GUIDES.glob("*.md") for name in SUBSTITUTION.findall(page.read_text(encoding="utf-8"))
            if name.startswith(("quickstart_", "own_task_"))}
    assert used - set(substitutions) == set(), "a guide names a figure that docs/_ext/run_facts.py does not read"
    assert {name for name in used if name.startswith("quickstart_")} >= {
        "quickstart_startup_lines", "quickstart_threads", "quickstart_data_wait", "quickstart_first_test_acc",
        "quickstart_first_test_loss"}
    typed_by_hand = re.findall(r"\d", SUBSTITUTION.sub("", what_the_run_shows_list()))
    assert typed_by_hand == [], "the quick start's list quotes a number of the log by hand: use {{ quickstart_... }}"


def test_what_the_quick_start_says_of_the_shown_run_holds_for_its_log():
    facts = run_facts.quickstart_facts(SHOWN_LOG.read_text(encoding="utf-8"))
    prose = what_the_run_shows_list()
    assert "at chance" in prose and facts["first_test_acc_value"] < 2 * facts["chance"], \
        "the first evaluation is no longer at chance: reword the quick start's list"
    assert "the loaders keep" in prose and facts["data_wait_max"] < 25, "the loaders no longer keep up: reword"
    assert facts["startup_lines"] == str(len(["version", "data", "model", "lr schedule"])), \
        "the log's start-up lines changed: say what each one holds in the quick start's list"
