"""The quick start's pace under each setting of the process's threads, on an idle machine and beside a competing job.

    python bench/threads.py [--settings default cores one passive] [--ddp] [--rounds 2] [--max-iters 30]
                            [--competitor spin|quickstart] [--alone-only | --busy-only]

Each run is ``examples/example.py max_iters=N progress=false`` (the digits at 32x32, a ResNet-18, no loader
workers), with the environment of its setting:

- ``default``: nothing set, what basetrainer decides (the start-up line says it);
- ``cores``: ``OMP_NUM_THREADS`` = the usable cores, OpenMP's own wait policy (torch's default before issue 53);
- ``one``: ``OMP_NUM_THREADS=1``;
- ``passive``: ``OMP_NUM_THREADS`` = the usable cores and ``OMP_WAIT_POLICY=passive`` (a waiting thread sleeps at
  once instead of spinning on its core);
- with ``--ddp``, two processes (``--distributed --gpu_id 0 1``, gloo) under ``ddp-default`` (nothing set: each
  process's threads as basetrainer decides) and ``ddp-cores`` (each process ``OMP_NUM_THREADS`` = all the cores).

"Busy" runs it beside one competing job started before and ended after it: ``spin``, one Python process spinning
on a core (the default: the same load every time), or ``quickstart``, another quick start with one thread. The
figure is the run's closing line, samples/s in steady state (after its first 10 batches, evaluations left out);
each round runs every setting in turn, so that a machine whose load drifts treats them alike; medians. Read the
load average it prints first: on a machine others use, "alone" is not idle. Figures: bench/RESULTS.md, "Threads".
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from run_output import CLOSING_LINE  # bench/, the script's folder

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "examples", "example.py")
THREADS_LINE = re.compile(r"(\d+) threads? per process \(([^)]*)\)")
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
SETTINGS = {
    "default": {},
    "cores": {"OMP_NUM_THREADS": str(CORES)},
    "one": {"OMP_NUM_THREADS": "1"},
    "passive": {"OMP_NUM_THREADS": str(CORES), "OMP_WAIT_POLICY": "passive"},
    "ddp-default": {},
    "ddp-cores": {"OMP_NUM_THREADS": str(CORES)},
}
COMPETITORS = {
    "spin": [sys.executable, "-c", "while True: pass"],
    "quickstart": [sys.executable, EXAMPLE, "num_epochs=1000", "progress=false", "loggers=[csv]"],
}


def run_once(setting, max_iters, folder):
    """(steady samples/s, whole-run samples/s, wall seconds, what the start-up line said of the threads)."""
    env = {key: value for key, value in os.environ.items() if key not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    env.update(SETTINGS[setting])
    command = [sys.executable, EXAMPLE, f"max_iters={max_iters}", "progress=false", "loggers=[csv]",
               "num_workers=0", f"work_dir={os.path.join(folder, 'work', setting)}"]
    if setting.startswith("ddp"):
        command += ["--distributed", "--gpu_id", "0", "1"]
    started = time.perf_counter()
    result = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {result.returncode}:\n{result.stderr[-2000:]}")
    output = result.stdout + result.stderr
    closing = CLOSING_LINE.search(output)
    threads = THREADS_LINE.search(output)
    said = f"{threads.group(1)} ({threads.group(2)})" if threads else "-"
    whole, steady = (int(closing.group(1)), int(closing.group(2))) if closing else (float("nan"), float("nan"))
    return steady, whole, wall, said


def measure(settings, rounds, max_iters, folder, competitor):
    results = {setting: [] for setting in settings}
    for _ in range(rounds):
        for setting in settings:
            rival = subprocess.Popen(COMPETITORS[competitor], cwd=folder, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL,
                                     env={**os.environ, "OMP_NUM_THREADS": "1"}) if competitor else None
            try:
                if competitor == "quickstart":
                    time.sleep(8)  # past its start-up, into its training
                results[setting].append(run_once(setting, max_iters, folder))
            finally:
                if rival is not None:
                    rival.kill()
                    rival.wait()
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--settings", nargs="+", default=["default", "cores", "one", "passive"],
                        choices=list(SETTINGS))
    parser.add_argument("--ddp", action="store_true", help="add ddp-default and ddp-cores")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-iters", type=int, default=30)
    parser.add_argument("--competitor", choices=list(COMPETITORS), default="spin")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--alone-only", action="store_true")
    group.add_argument("--busy-only", action="store_true")
    args = parser.parse_args(argv)
    settings = args.settings + (["ddp-default", "ddp-cores"] if args.ddp else [])
    with open("/proc/loadavg", encoding="utf-8") as stream:
        load = stream.read().split()[:3]
    print(f"usable cores {CORES}, load average before {' '.join(load)}, max_iters {args.max_iters}, "
          f"{args.rounds} rounds (medians), competitor: {args.competitor}")
    print("| condition | setting | threads (start-up line) | samples/s steady | samples/s whole run | wall clock | "
          "vs the best of the condition |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    conditions = [("alone", None), ("beside one job", args.competitor)]
    conditions = conditions[:1] if args.alone_only else conditions[1:] if args.busy_only else conditions
    with tempfile.TemporaryDirectory() as folder:  # the digits are written here once, by the first run
        for name, competitor in conditions:
            results = measure(settings, args.rounds, args.max_iters, folder, competitor)
            medians = {setting: (statistics.median(run[0] for run in runs), statistics.median(run[1] for run in runs),
                                 statistics.median(run[2] for run in runs), runs[-1][3])
                       for setting, runs in results.items()}
            best = max(steady for steady, *_ in medians.values())
            for setting, (steady, whole, wall, said) in medians.items():
                print(f"| {name} | {setting} | {said} | {steady:.0f} | {whole:.0f} | {wall:.1f} s | "
                      f"{steady / best:.2f} |")


if __name__ == "__main__":
    main()
