"""Kills at random points of every phase, then resumes: are the resumed runs bitwise equal, do the checkpoints load?

For 1 and 2 gloo processes, tests/workers/tiny.py (DDP, dropout, augmentation, a cosine LR
schedule, an evaluation at each of 3 epoch ends, ``last.pth`` every 2 steps) first runs
uninterrupted. Then ``--points`` runs each get one SIGKILL, on a random rank, at a random
point of a random phase:

- training: the end of a random training batch;
- evaluation: a random test batch;
- save: inside a random write of the training state, half-way through its bytes or just
  before one of its renames (the main process writes);
- start-up: a run is first killed at a random training batch, and its resume is killed
  while building its loaders or while loading the checkpoint.

After each kill every checkpoint file left (``last.pth``, ``last.prev.pth``) is loaded (its
checksum checked, then ``torch.load``), and the run is resumed with ``resume: auto`` to the
end. The table counts the resumed runs whose final weights are bitwise equal to the
uninterrupted run's, the files that failed to load, and the resumes that took
``last.prev.pth`` because the kill left no loadable ``last.pth`` (a kill between a save's
renames).

    python bench/faults.py [--points 20] [--seed 0] [--procs 1 2]
"""
import argparse
import datetime
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time

import torch

from basetrainer.checkpoint import load_checkpoint
from basetrainer.errors import CheckpointError

TINY = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests", "workers", "tiny.py")
JOB = ["--every-n-iters", "2", "--epochs", "3"]
PHASES = ("training", "evaluation", "save", "start-up")


def tiny(work, procs, *extra):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, TINY, "--procs", str(procs), "--work-dir", work,
                           "--out", os.path.join(work, "w.pt"), *JOB, *extra],
                          capture_output=True, text=True, env=env, timeout=600)


def reference(root, procs):
    """The uninterrupted run's weights and how many events of each phase each rank saw."""
    work, probes = os.path.join(root, f"reference{procs}"), os.path.join(root, f"probes{procs}")
    os.makedirs(probes)
    done = tiny(work, procs, "--probe-dir", probes)
    if done.returncode != 0:
        raise SystemExit(f"the uninterrupted run failed:\n{done.stderr[-3000:]}")
    seen = [json.load(open(os.path.join(probes, f"rank{rank}.json")))["phases"] for rank in range(procs)]
    return torch.load(os.path.join(work, "w.pt"), weights_only=False)["weights"], seen


def fault_points(rng, procs, seen, count):
    """``count`` kills: each a list of ``--kill-in`` points, one per run before the last resume."""
    points = []
    for _ in range(count):
        phase, rank = rng.choice(PHASES), rng.randrange(procs)
        if phase == "save":  # the first save has 2 renames (no last.pth yet to move aside), the others 4
            save = rng.randint(1, seen[0]["save"])
            points.append([f"save:{save}:{rng.randint(0, 2 if save == 1 else 4)}@0"])
        elif phase == "start-up":  # after the first save (step 2), so that there is a checkpoint to load
            points.append([f"training:{rng.randint(3, seen[rank]['training'])}@{rank}",
                           f"start-up:{rng.randint(1, 2)}@{rng.randrange(procs)}"])
        else:
            points.append([f"{phase}:{rng.randint(1, seen[rank][phase])}@{rank}"])
    return points


def check_files(work):
    """``{name: whether it loads}`` for the checkpoint files left in the run's model folder."""
    loads = {}
    for name in ("last.pth", "last.prev.pth"):
        path = os.path.join(work, "model", name)
        if os.path.exists(path):
            try:
                load_checkpoint(path)
                loads[name] = True
            except CheckpointError:
                loads[name] = False
    return loads


def trial(root, procs, index, kills, expected):
    work = os.path.join(root, f"p{procs}_{index}")
    unloadable = 0
    for point in kills:
        killed = tiny(work, procs, "--resume", "auto", "--kill-in", point)
        if killed.returncode == 0:
            return {"point": point, "error": "the kill point was never reached"}
        loads = check_files(work)
        unloadable += list(loads.values()).count(False)
    previous = not loads.get("last.pth") and loads.get("last.prev.pth")  # what resume: auto then takes
    resumed = tiny(work, procs, "--resume", "auto")
    if resumed.returncode != 0:
        return {"point": " ".join(kills), "error": resumed.stderr.strip().splitlines()[-1], "unloadable": unloadable}
    weights = torch.load(os.path.join(work, "w.pt"), weights_only=False)["weights"]
    return {"point": " ".join(kills), "equal": all(torch.equal(weights[k], expected[k]) for k in expected),
            "unloadable": unloadable, "fallback": bool(previous)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=20, help="kills per number of processes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    rng, rows, started = random.Random(args.seed), [], time.monotonic()
    with tempfile.TemporaryDirectory() as root:
        for procs in args.procs:
            expected, seen = reference(root, procs)
            points = fault_points(rng, procs, seen, args.points)
            results = [trial(root, procs, index, kills, expected) for index, kills in enumerate(points)]
            for result in results:
                if not result.get("equal"):
                    print(f"  {procs} process(es), kill at {result['point']}: {result.get('error', 'weights differ')}")
            phases = [kills[-1].split(":")[0] for kills in points]
            rows.append((procs, len(results), sum(bool(r.get("equal")) for r in results),
                         sum(r.get("unloadable", 0) for r in results), sum(bool(r.get("fallback")) for r in results),
                         ", ".join(f"{phase} {phases.count(phase)}" for phase in PHASES)))
    print(f"date: {datetime.date.today()}   machine: {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, torch {torch.__version__}   ({time.monotonic() - started:.0f} s)")
    print(f"command: python bench/faults.py --points {args.points} --seed {args.seed} "
          f"--procs {' '.join(map(str, args.procs))}")
    print(f"{'processes':>10}{'kills':>7}{'resumed runs bitwise equal':>28}{'checkpoints unloadable':>24}"
          f"{'resumes from last.prev.pth':>28}   kills by phase")
    for procs, kills, equal, unloadable, fallbacks, by_phase in rows:
        print(f"{procs:>10}{kills:>7}{f'{equal}/{kills}':>28}{unloadable:>24}{fallbacks:>28}   {by_phase}")
    total, equal = sum(row[1] for row in rows), sum(row[2] for row in rows)
    print(f"{'all':>10}{total:>7}{f'{equal}/{total}':>28}{sum(row[3] for row in rows):>24}"
          f"{sum(row[4] for row in rows):>28}")


if __name__ == "__main__":
    main()
