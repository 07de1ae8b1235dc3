"""The figures that the guides' prose quotes from the runs shown in the documentation, read from those runs' output.

``docs/_scripts/what_the_run_shows.py`` copies a real run's log into ``docs/_generated/``; the prose around it does not
copy numbers by hand but names them as MyST substitutions (``{{ quickstart_threads }}``), which ``conf.py`` fills from
:func:`substitutions`. A regeneration thus changes the prose with the log; a log whose lines no longer have the shapes
read here fails the build (``KeyError`` at conf.py) and tests/docs/test_what_the_run_shows.py.
"""
import re
from pathlib import Path

GENERATED = Path(__file__).resolve().parents[1] / "_generated"
LINE_START = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Z]+ ", re.MULTILINE)


def messages(log: str) -> list:
    """The messages of the log's lines, the timestamp and level taken off (continuation lines left out)."""
    return [line[match.end():] for line in log.splitlines() if (match := LINE_START.match(line + "\n"))]


def one(pattern: str, text: str, what: str) -> re.Match:
    match = re.search(pattern, text)
    if match is None:
        raise KeyError(f"the shown log has no {what} (pattern {pattern!r}): rerun docs/_scripts/what_the_run_shows.py "
                       f"and update docs/_ext/run_facts.py if the code's lines changed")
    return match


def quickstart_facts(log: str) -> dict:
    """The quick start run's figures: what its start-up lines say, its step lines' data wait, its evaluations."""
    lines = messages(log)
    first_step = next(index for index, line in enumerate(lines) if re.match(r"epoch \d+/\d+ iter ", line))
    head = lines[0]
    threads = one(r"\| (\d+) threads? per process \(([^)]*)\)", head, "threads per process on the first line")
    waits = sorted({int(value) for value in re.findall(r" data (\d+)% ", "\n".join(lines))})
    if not waits:
        one(r" data \d+% ", "", "data wait on a step line")
    epochs = [one(r"test Acc ([\d.]+) loss ([\d.]+)", line, "test accuracy and loss on an epoch line")
              for line in lines if re.match(r"epoch \d+/\d+ done", line)]
    classes = int(one(r", (\d+) classes", "\n".join(lines), "class count").group(1))
    closing = one(r"samples/s (\d+) over the whole run .*?, (\d+) in steady state", lines[-1], "closing line")
    return {
        "startup_lines": str(first_step),
        "threads": threads.group(1),
        "threads_why": threads.group(2),
        "data_wait": f"{waits[0]}%" if len(waits) == 1 else f"{waits[0]}-{waits[-1]}%",
        "data_wait_max": waits[-1],
        "first_test_acc": f"{float(epochs[0].group(1)):.0f}%",
        "first_test_acc_value": float(epochs[0].group(1)),
        "first_test_loss": epochs[0].group(2),
        "last_test_acc": f"{float(epochs[-1].group(1)):.1f}%",
        "chance": 100.0 / classes,
        "whole_run_rate": closing.group(1),
        "steady_rate": closing.group(2),
    }


def own_task_facts(output: str) -> dict:
    """The own-task script's figures: how many progress lines it printed (one per epoch)."""
    progress = re.findall(r"^Train epoch (\d+)/(\d+) ", output, re.MULTILINE)
    if not progress:
        one(r"^Train epoch \d+/\d+ ", "", "progress line")
    return {"progress_lines": str(len(progress)), "epochs": progress[-1][1]}


def substitutions(generated: Path = GENERATED) -> dict:
    """MyST substitutions ``quickstart_<fact>`` and ``own_task_<fact>``, their text as the prose shows it."""
    facts = {"quickstart": quickstart_facts((generated / "quickstart" / "log.txt").read_text(encoding="utf-8")),
             "own_task": own_task_facts((generated / "own-task" / "output.txt").read_text(encoding="utf-8"))}
    return {f"{run}_{name}": str(value) for run, values in facts.items() for name, value in values.items()}
