"""Instructions per training step, counted by valgrind: bench/overhead.py's variants, without timing noise.

On a shared or virtual machine, wall-clock differences of a few microseconds per step are
lost in noise; instruction counts are exact and repeatable. This script re-runs itself
under ``valgrind --tool=callgrind``, trains each variant of ``bench/overhead.py`` for a
short and a long run, dumps the counters between runs (``callgrind_control --dump``),
and prints the instructions per step (the slope between the two lengths, so start-up
and per-epoch costs cancel) and the ratio to the hand-written loop.

Caveat: under valgrind the program runs ~50x slower, so work triggered by the clock
(tqdm redraws its bar every 0.5 s) happens far more often per step than in real runs and
is overcounted; work triggered by counts (log_freq, epochs) is counted as it is.

    python bench/instructions.py           # needs valgrind; takes ~5 minutes
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SHORT, LONG, EPOCHS = 50, 150, 2  # batches per epoch of the two runs, epochs each
VARIANTS = ("hand", "trainer", "trainer+callbacks")


def inside_valgrind():
    import logging

    import torch

    import overhead

    torch.set_num_threads(1)
    logging.getLogger("basetrainer").setLevel(logging.WARNING)
    overhead.EPOCHS = EPOCHS

    class Args:
        log_freq = 50

    runs = {"short": overhead.make_batches(SHORT), "long": overhead.make_batches(LONG)}
    for name in VARIANTS:  # first-call costs (imports, allocator) out of the way
        overhead.VARIANTS[name](runs["short"], Args)
    pid = str(os.getpid())
    subprocess.run(["callgrind_control", "--dump=warm-up", pid], capture_output=True, check=True)
    for name in VARIANTS:
        for length, batches in runs.items():
            overhead.VARIANTS[name](batches, Args)
            subprocess.run(["callgrind_control", f"--dump={name}@{length}", pid], capture_output=True, check=True)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        env = dict(os.environ, BASETRAINER_BENCH_INSIDE_VALGRIND="1", PYTHONHASHSEED="0", OMP_NUM_THREADS="1")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                        os.path.abspath(__file__)], env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        totals = {}
        for path in glob.glob(out + ".*"):
            text = open(path).read()
            label = re.search(r"^desc: Trigger: Client Request: (\S+)|^desc: Trigger: dump (\S+)", text, re.M)
            total = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
            if label and total:
                totals[label.group(1) or label.group(2)] = int(total.group(1))
    steps = (LONG - SHORT) * EPOCHS
    per_step = {name: (totals[f"{name}@long"] - totals[f"{name}@short"]) / steps for name in VARIANTS}
    print(f"MLP 64-128-10, batch 64, runs of {SHORT * EPOCHS} and {LONG * EPOCHS} steps, 1 thread, callgrind")
    print(f"{'variant':<20}{'instructions/step':>18}{'vs hand':>9}")
    for name in VARIANTS:
        print(f"{name:<20}{per_step[name]:>18,.0f}{per_step[name] / per_step['hand']:>9.4f}")


if __name__ == "__main__":
    inside_valgrind() if os.environ.get("BASETRAINER_BENCH_INSIDE_VALGRIND") else main()
