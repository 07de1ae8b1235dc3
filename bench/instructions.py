"""Instructions per training step, counted by valgrind: bench/overhead.py's variants, without timing noise.

On a shared or virtual machine, wall-clock differences of a few microseconds per step are
lost in noise; instruction counts are exact and repeatable. This script re-runs itself
under ``valgrind --tool=callgrind``, trains each variant of ``bench/overhead.py`` for a
short and a long run, dumps the counters between runs (``callgrind_control --dump``),
and prints the instructions per step (the slope between the two lengths, so start-up
and per-epoch costs cancel) and the ratio to the hand-written loop.

Each variant runs in a valgrind process of its own (as many at once as there are cores):
glibc's allocator takes slower paths depending on what earlier runs left on the heap, and
with all variants in one process their figures moved by up to ~1% with the order they ran in.

Under valgrind the program runs ~400x slower, so work triggered by the clock would happen
far more often per step than in real runs: the progress bar's redraw interval is
stretched by that factor to keep its redraws per step as they are outside. Work
triggered by counts (log_freq, epochs) is counted as it is. Every run starts after a
``gc.collect()``, so that where a collection falls does not depend on the runs before.

    python bench/instructions.py                 # needs valgrind; ~8 minutes on 2 cores
    python bench/instructions.py trainer         # only these variants (and the hand-written loop)
"""
import concurrent.futures
import gc
import glob
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SHORT, LONG, EPOCHS = 50, 150, 2  # batches per epoch of the two runs, epochs each
VALGRIND_SLOWDOWN = 400  # measured here: ~220 us per hand-written step outside valgrind, ~90 ms inside


def inside_valgrind():
    import logging

    import torch

    import overhead

    torch.set_num_threads(1)
    logging.getLogger("basetrainer").setLevel(logging.WARNING)
    overhead.EPOCHS = EPOCHS
    # valgrind runs the program ~400x slower: redraw the bar as often per step as it would be outside.
    from basetrainer.callbacks.progress_bar import ProgressBar

    ProgressBar.mininterval *= VALGRIND_SLOWDOWN

    class Args:
        log_freq = 50

    variants = os.environ["BASETRAINER_BENCH_VARIANTS"].split(",")  # what main() chose
    runs = {"short": overhead.make_batches(SHORT), "long": overhead.make_batches(LONG)}
    for name in variants:  # first-call costs (imports, allocator) out of the way
        overhead.VARIANTS[name](runs["short"], Args)
    pid = str(os.getpid())
    subprocess.run(["callgrind_control", "--dump=warm-up", pid], capture_output=True, check=True)
    for name in variants:
        for length, batches in runs.items():
            gc.collect()  # the same collector state for every run: otherwise where a collection falls is luck
            subprocess.run(["callgrind_control", "--dump=gc", pid], capture_output=True, check=True)
            overhead.VARIANTS[name](batches, Args)
            subprocess.run(["callgrind_control", f"--dump={name}@{length}", pid], capture_output=True, check=True)


def count_in_valgrind(variant):
    """The instruction totals of ``variant``'s runs, from a valgrind process of its own."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        env = dict(os.environ, BASETRAINER_BENCH_INSIDE_VALGRIND="1", BASETRAINER_BENCH_VARIANTS=variant,
                   PYTHONHASHSEED="0", OMP_NUM_THREADS="1")
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
        return totals


def main():
    import overhead

    known = tuple(overhead.VARIANTS)
    unknown = [name for name in sys.argv[1:] if name not in known]
    if unknown:
        sys.exit(f"error: unknown variant {unknown[0]!r}: choose from {', '.join(known[1:])}")
    variants = ("hand", *[name for name in sys.argv[1:] if name != "hand"]) if sys.argv[1:] else known
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        totals = {}
        for counts in pool.map(count_in_valgrind, variants):
            totals.update(counts)
    steps = (LONG - SHORT) * EPOCHS
    per_step = {name: (totals[f"{name}@long"] - totals[f"{name}@short"]) / steps for name in variants}
    print(f"MLP 64-128-10, batch 64, runs of {SHORT * EPOCHS} and {LONG * EPOCHS} steps, 1 thread, callgrind")
    print(f"{'variant':<20}{'instructions/step':>18}{'vs hand':>9}")
    for name in variants:
        print(f"{name:<20}{per_step[name]:>18,.0f}{per_step[name] / per_step['hand']:>9.4f}")


if __name__ == "__main__":
    inside_valgrind() if os.environ.get("BASETRAINER_BENCH_INSIDE_VALGRIND") else main()
