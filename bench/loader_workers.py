"""The quick start's pace with 0, 1 and 2 loader workers: samples/s and the share of each step spent waiting
for data, as its log lines print them, its rates over the whole run and in steady state (its closing line), and
how long the process takes to exit after its last line.

    python bench/loader_workers.py [--workers 0 1 2] [--epochs 3] [--rounds 2] [--max-exit-seconds S]

Each round runs ``examples/example.py`` once per worker count, in turn, so that a machine whose load
changes treats them alike. The rates are the medians of the log lines after the first epoch (worker
start-up and the first steps left out; of all lines when there is one epoch). It trains on the GPU where there is one. With ``--max-exit-seconds``
it fails (exit 1) when a run took longer than that to exit after its last line: a loader worker that outlived
the training (bench/gpu.sh checks 8 workers so). Figures: bench/RESULTS.md, "Loader workers".
"""
import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from run_output import CLOSING_LINE  # bench/, the script's folder

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "examples", "example.py")
STEP_LINE = re.compile(r"epoch (\d+)/\d+ iter \S+ .*samples/s (\d+) data (\d+)%")


def run_once(workers, epochs, folder):
    """(samples/s, data-wait share, the closing line's whole-run and steady samples/s, wall seconds, CPU seconds of
    all its processes, seconds from the last line to the exit) of one run."""
    command = [sys.executable, EXAMPLE, f"num_epochs={epochs}", f"num_workers={workers}", "progress=false",
               "log_freq=5", "loggers=[csv]", f"work_dir={os.path.join(folder, f'w{workers}')}"]
    cpu_before = _children_cpu_seconds()
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rates, waits, closing, last_line = [], [], (float("nan"), float("nan")), started
    for line in process.stdout:
        last_line = time.perf_counter()
        match = STEP_LINE.search(line)
        if match and (int(match.group(1)) > 1 or epochs == 1):
            rates.append(int(match.group(2)))
            waits.append(int(match.group(3)))
        found = CLOSING_LINE.search(line)
        if found:
            closing = tuple(map(int, found.groups()))
    if process.wait() != 0:
        raise SystemExit(f"{' '.join(command)} exited {process.returncode}")
    ended = time.perf_counter()
    cpu = _children_cpu_seconds() - cpu_before
    return statistics.median(rates), statistics.median(waits), *closing, ended - started, cpu, ended - last_line


def _children_cpu_seconds() -> float:
    """User and system seconds of the finished children (and theirs: the loader workers), so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-exit-seconds", type=float, default=None)
    args = parser.parse_args(argv)
    results = {workers: [] for workers in args.workers}
    with tempfile.TemporaryDirectory() as folder:  # the digits are written here once, by the first run
        for _ in range(args.rounds):
            for workers in args.workers:
                results[workers].append(run_once(workers, args.epochs, folder))
    print(f"cores usable: {len(os.sched_getaffinity(0))}, {args.epochs} epochs, {args.rounds} rounds (medians)")
    print("| num_workers | samples/s (step lines) | data wait | samples/s whole run | samples/s steady | wall clock "
          "| CPU time, all processes | exit after the last line |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for workers, runs in results.items():
        rate, wait, whole_run, steady, wall, cpu, exit_lag = (statistics.median(values) for values in zip(*runs))
        print(f"| {workers} | {rate:.0f} | {wait:.0f}% | {whole_run:.0f} | {steady:.0f} | {wall:.1f} s | {cpu:.1f} s "
              f"| {exit_lag:.2f} s |")
    slowest = max(run[-1] for runs in results.values() for run in runs)
    if args.max_exit_seconds is not None and slowest > args.max_exit_seconds:
        raise SystemExit(f"a run exited {slowest:.1f} s after its last line, more than {args.max_exit_seconds} s")


if __name__ == "__main__":
    main()
