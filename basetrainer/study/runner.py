"""Running a study: its runs one after the other, each in its own process, with a progress line each; the tables
and the picture after every run it trains and at the end; and a study started again goes on with the runs left.

A run is done once its row file exists (``study_row.json``, written after its process ended, however it
ended: a run that failed is a row that says so, and the study goes on). A run folder without one is a run cut
short when the study was stopped: it is removed and the run done again from scratch, not resumed, so that
its times are one process's, as the others' are.
"""
import contextlib
import json
import os
import shutil
import signal

from ..errors import TrainingInterrupted
from ..utils.eta import format_seconds
from ..utils.file_utils import write_text_atomic
from .plan import PLAN_FILE
from .plot import write_study_plot
from .process import OUTPUT_FILE, run_process
from .table import read_row, run_row, write_row, write_tables


def run_study(plan, echo=print) -> list:
    """Runs ``plan`` (a checked :class:`~.plan.StudyPlan`) in ``plan.out``; returns each run's ``{"row", "curve"}``
    in the order of its batch sizes. ``echo`` takes the progress lines. Stopped by Ctrl-C or SIGTERM, it
    kills the run in progress and raises TrainingInterrupted (exit code 75): the same command continues."""
    plan.check_continues()
    os.makedirs(plan.out, exist_ok=True)
    write_text_atomic(os.path.join(plan.out, PLAN_FILE), json.dumps(plan.settings(), indent=1) + "\n")
    results = []
    with _terminate_as_interrupt():
        for number, batch_size in enumerate(plan.batch_sizes, 1):
            where = f"study: run {number}/{len(plan.batch_sizes)}, batch {batch_size}"
            result = read_row(plan.run_dir(batch_size))
            if result is not None:
                echo(f"{where}: done before, kept ({_line(result['row'], plan)})")
                results.append(result)
            else:
                results.append(_run(plan, batch_size, where, echo))
                _write_outputs(results, plan)  # the study so far, while the next run trains
    _write_outputs(results, plan)
    return results


def _write_outputs(results, plan) -> None:
    write_tables([result["row"] for result in results], plan.out, plan.target_metric)
    write_study_plot(results, plan.out, plan.target_metric, plan.target_value)


def _run(plan, batch_size: int, where: str, echo) -> dict:
    run_dir = plan.run_dir(batch_size)
    if os.path.exists(run_dir):
        echo(f"{where}: {run_dir} holds a run cut short when the study stopped; it is removed and run again")
        shutil.rmtree(run_dir)
    echo(f"{where}: training in {run_dir} (its output: {os.path.join(run_dir, OUTPUT_FILE)})")
    try:
        outcome = run_process(plan.command(batch_size), run_dir, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    except KeyboardInterrupt:
        raise TrainingInterrupted(f"the study stopped during the run of batch {batch_size}; run the same command "
                                  f"again to continue with the runs left (that one from scratch)") from None
    result = run_row(run_dir, batch_size, plan, outcome)
    write_row(run_dir, result)
    echo(f"{where}: {outcome.status} ({format_seconds(outcome.seconds)}; {_line(result['row'], plan)})")
    return result


def _line(row: dict, plan) -> str:
    """``global 64, lr 0.05; Acc 98 reached at epoch 3, 40.1 s of training; best 98.9, final 98.7``."""
    parts = [f"global {row['global_batch']}" + (f", lr {row['lr']:.4g}" if row["lr"] is not None else "")]
    if plan.target_value is not None:
        parts.append(f"{plan.target_metric} {plan.target_value:g} reached at epoch {row['target_epoch']}, "
                     f"{row['target_time_s']:.1f} s of training" if row["target_time_s"] is not None
                     else f"{plan.target_metric} {plan.target_value:g} not reached")
    if row["best"] is not None:
        parts.append(f"best {row['best']:.4g}, final {row['final']:.4g}")
    return "; ".join(parts)


@contextlib.contextmanager
def _terminate_as_interrupt():
    """SIGTERM (a scheduler's or ``kill``'s stop) ends the study as Ctrl-C does, through KeyboardInterrupt."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

