"""Time to mAP@0.5 on the generated digit scenes: ``examples/detection.py`` with its defaults (fcos_tiny, 1,200
training canvases of 64x64, batch 16) until the test mAP@0.5 reaches ``--target``, and its images/s.

    python bench/detection.py [--target 0.5] [--epochs 12] [--threads 1]

The run stops at the first evaluation that reaches the target (``target: {metric: map_50, stop: true}``);
``log/target.json`` says when (wall seconds since training began, start-up excluded, and the epoch). The
training rate is the run's closing line's, evaluations included and excluded. ``--threads`` sets
OMP_NUM_THREADS: on a machine whose cores other jobs also use, torch's threads wait for each other (on the
2-core CPU VM under a load of 5, 30 steps took 10 s with 1 thread and 124 s with 2). Figures:
bench/RESULTS.md, "Object detection".
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from run_output import CLOSING_LINE  # bench/, the script's folder

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "examples", "detection.py")
EVALUATION_LINE = re.compile(r"mAP ([\d.]+) \| mAP@0.5 ([\d.]+) \| mAP@0.75 ([\d.]+)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", type=float, default=0.5, help="the test mAP@0.5 to reach")
    parser.add_argument("--epochs", type=int, default=12, help="at most this many epochs")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the run")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        work_dir = os.path.join(folder, "work")
        command = [sys.executable, EXAMPLE, f"num_epochs={args.epochs}", "progress=false", "loggers=[csv]",
                   f"work_dir={work_dir}", f"target={{metric: map_50, value: {args.target}, stop: true}}"]
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        started = time.perf_counter()
        finished = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
        if finished.returncode != 0:
            raise SystemExit(f"{' '.join(command)} exited {finished.returncode}: {finished.stderr[-2000:]}")
        log = finished.stdout + finished.stderr
        evaluations = [tuple(map(float, match)) for match in EVALUATION_LINE.findall(log)]
        rates = CLOSING_LINE.search(log)
        target_file = os.path.join(work_dir, "log", "target.json")
        reached = None
        if os.path.exists(target_file):
            with open(target_file, encoding="utf-8") as stream:
                reached = json.load(stream)
    print(f"command: {' '.join(command[1:])} (OMP_NUM_THREADS={args.threads})")
    print("epoch | mAP | mAP@0.5 | mAP@0.75")
    for epoch, (mean_ap, at_50, at_75) in enumerate(evaluations, start=1):
        print(f"{epoch} | {mean_ap:.3f} | {at_50:.3f} | {at_75:.3f}")
    if reached and reached.get("reached"):
        print(f"mAP@0.5 >= {args.target} at epoch {reached['epoch']}, step {reached['step']}, "
              f"{reached['time_s']:.0f} s of training ({wall:.0f} s for the whole command, start-up and data "
              f"generation included)")
    else:
        print(f"mAP@0.5 {args.target} not reached in {args.epochs} epochs ({wall:.0f} s)")
    if rates:
        print(f"training images/s: {rates.group(1)} over the whole run (evaluations included), {rates.group(2)} in "
              f"steady state")


if __name__ == "__main__":
    main()
