"""Finished jobs that fail in teardown: 2-process launches of a complete job, counting those that abort.

Each launch runs tests/workers/tiny.py on 2 gloo processes (DDP, loss recorder, checkpoints)
for one epoch; rank 0 then works on for ``--linger`` seconds after training, as a job that
draws its curves does, while rank 1 exits. A launch "aborted" when it did not exit 0; the
teardown aborts are counted apart (a worker killed by SIGABRT after its work, "terminate
called without an active exception"), as is the launcher's warning about a worker that
finished its work and then died while exiting (the job then still succeeds).

    python bench/teardown.py [--launches 30] [--linger 0.5] [--parallel 1]

``--parallel N`` runs N launches at a time: a loaded machine, as under a test suite run in
parallel, where the abort shows most (gloo's threads wait longer for a core).

To measure another version of the engine, put it first on PYTHONPATH (tiny.py runs with
whatever ``basetrainer`` the environment imports).
"""
import argparse
import concurrent.futures
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import time

TINY = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests", "workers", "tiny.py")


def launch_once(linger):
    started = time.monotonic()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as work_dir:
        done = subprocess.run([sys.executable, TINY, "--procs", "2", "--epochs", "1", "--work-dir", work_dir,
                               "--linger", str(linger)], capture_output=True, text=True, env=env, timeout=600)
    return done.returncode, done.stderr, time.monotonic() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--launches", type=int, default=30)
    parser.add_argument("--linger", type=float, default=0.5, help="seconds rank 0 works on after training")
    parser.add_argument("--parallel", type=int, default=1, help="launches at a time")
    args = parser.parse_args()
    failed, teardown_aborts, survived, seconds = [], 0, 0, []
    with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
        outcomes = list(pool.map(launch_once, [args.linger] * args.launches))
    for index, (code, stderr, took) in enumerate(outcomes):
        seconds.append(took)
        aborted = "SIGABRT" in stderr or "terminate called without an active exception" in stderr
        survived += "finished its work, then" in stderr
        if code != 0:
            failed.append(index)
            teardown_aborts += aborted
            print(f"launch {index + 1}: exit {code}: {stderr.strip().splitlines()[-1] if stderr.strip() else ''}",
                  flush=True)
    print(f"date: {datetime.date.today()}   machine: {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}")
    print(f"command: python bench/teardown.py --launches {args.launches} --linger {args.linger} "
          f"--parallel {args.parallel}")
    print(f"{'launches':>9}{'exit 0':>8}{'failed':>8}{'of which teardown aborts':>26}{'died after their work':>23}"
          f"{'s per launch':>14}")
    print(f"{args.launches:>9}{args.launches - len(failed):>8}{len(failed):>8}{teardown_aborts:>26}{survived:>23}"
          f"{sum(seconds) / len(seconds):>14.1f}")


if __name__ == "__main__":
    main()
