"""Instructions per training step, counted by valgrind: bench/overhead.py's variants, without timing noise.

On a shared or virtual machine, wall-clock differences of a few microseconds per step are
lost in noise; instruction counts are exact and repeatable. This script re-runs itself
under ``valgrind --tool=callgrind`` and counts a window of steady steps: each variant
trains once to warm up (imports, dispatcher caches, the allocator), then trains again,
and its batch list zeroes the counters as batch ON of the last epoch is drawn and dumps
them as batch OFF is drawn (``callgrind_control``). So start-up, epoch ends and one-off
work fall outside. The window holds the same number of NaN checks (every 50 batches)
for every variant, and the batch list's own generator, the same for all. It prints the
instructions per step and the ratio to the hand-written loop.

Each variant runs in a valgrind process of its own (as many at once as there are cores):
glibc's allocator takes slower paths depending on what earlier runs left on the heap, and
with all variants in one process their figures moved by up to ~1% with the order they ran in.

Under valgrind the program runs ~400x slower, so work triggered by the clock would happen
far more often per step than in real runs: the progress bar's redraw interval is
stretched by that factor to keep its redraws per step as they are outside. Work
triggered by counts (log_freq, epochs) is counted as it is. Both runs start after a
``gc.collect()``.

    python bench/instructions.py                 # needs valgrind; ~10 minutes on 2 cores
    python bench/instructions.py trainer         # only these variants (and the hand-written loop)
    python bench/instructions.py --check         # the guard: hand, trainer, trainer+callbacks (~5 minutes)
    python bench/instructions.py --check --keep DIR   # and the window's callgrind dumps, for per-function counts
                                                      # (bench/callgrind_functions.py compares two of them)

``--check`` is the guard to run by hand before a round ends: it exits with status 1, naming the figures, when the
bare trainer's instructions per step exceed ``GUARD`` (1.045) times the hand-written loop's. Instruction counts do
not move with the load of other jobs on the machine, so it cannot flicker as a wall-clock ratio does: an addition
to the step shows when it lands. The stock callbacks' figure is printed beside it, unguarded.
"""
import concurrent.futures
import gc
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

WARM_UP, STEPS, EPOCHS = 50, 260, 2  # batches per epoch of the warm-up and the counted run, epochs each
ON, OFF = 50, 250  # the counted window: batches ON..OFF-1 of the last epoch (4 NaN checks)
GUARD = 1.045  # --check: the bare trainer's instructions per step at most this times the hand-written loop's
CHECKED = ("hand", "trainer", "trainer+callbacks")  # what --check counts
VALGRIND_SLOWDOWN = 400  # measured here: ~220 us per hand-written step outside valgrind, ~90 ms inside


def inside_valgrind():
    import logging

    import overhead
    import torch

    torch.set_num_threads(1)
    logging.getLogger("basetrainer").setLevel(logging.WARNING)
    overhead.EPOCHS = EPOCHS
    # valgrind runs the program ~400x slower: redraw the bar as often per step as it would be outside.
    from basetrainer.callbacks.progress_bar import ProgressBar

    ProgressBar.mininterval *= VALGRIND_SLOWDOWN

    args = overhead.parse_args([])  # the defaults: on the CPU, log_freq 50
    name = os.environ["BASETRAINER_BENCH_VARIANT"]  # what main() chose
    pid = str(os.getpid())

    class Counted(list):
        """The batches; in the last epoch of a counted run, callgrind's counters are zeroed as
        batch ON is drawn and dumped as batch OFF is drawn."""
        epochs = 0
        counted = False
        dumped = False

        def __iter__(self):
            self.epochs += 1
            counting = self.counted and self.epochs == EPOCHS
            for i, batch in enumerate(list.__iter__(self)):
                if counting and i == ON:
                    subprocess.run(["callgrind_control", "--zero", pid], capture_output=True, check=True)
                elif counting and i == OFF:
                    subprocess.run(["callgrind_control", f"--dump={name}", pid], capture_output=True, check=True)
                    self.dumped = True
                yield batch

    for counted, steps in ((False, WARM_UP), (True, STEPS)):  # a warm-up run, then the counted one
        run = Counted(overhead.make_batches(args, steps))
        run.counted = counted
        gc.collect()  # the same collector state for both runs: otherwise where a collection falls is luck
        overhead.VARIANTS[name](run, args)
    if not run.dumped:
        sys.exit(f"error: {name} did not draw batch {OFF} of epoch {EPOCHS}: nothing was counted")


def count_in_valgrind(variant, keep=None):
    """The instructions of ``variant``'s counted window, from a valgrind process of its own; with ``keep`` (a
    folder), the window's callgrind dump is copied there as ``<variant>.callgrind``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        env = dict(os.environ, BASETRAINER_BENCH_INSIDE_VALGRIND="1", BASETRAINER_BENCH_VARIANT=variant,
                   PYTHONHASHSEED="0", OMP_NUM_THREADS="1")
        done = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                               os.path.abspath(__file__)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        dumps = glob.glob(out + ".*")  # the window's dump; the one written at exit has no suffix
        if done.returncode or len(dumps) != 1:
            ours = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("==")]
            last = (ours or ["no output"])[-1]  # the program's last line, not valgrind's summary
            sys.exit(f"error: {variant} under valgrind exited with {done.returncode}: {last}")
        if keep is not None:
            shutil.copy(dumps[0], os.path.join(keep, f"{variant}.callgrind"))
        return int(re.search(r"^(?:summary|totals): (\d+)", open(dumps[0]).read(), re.M).group(1))


def main(argv):
    import overhead

    keep = argv[argv.index("--keep") + 1] if "--keep" in argv[:-1] else None
    if keep is not None:
        os.makedirs(keep, exist_ok=True)
        argv = [arg for index, arg in enumerate(argv) if index not in (argv.index("--keep"), argv.index("--keep") + 1)]
    check = "--check" in argv
    names = [name for name in argv if name != "--check"]
    known = tuple(overhead.VARIANTS)
    unknown = [name for name in names if name not in known]
    if unknown:
        sys.exit(f"error: unknown variant {unknown[0]!r}: choose from {', '.join(known[1:])}, or --check")
    if check and names:
        sys.exit("error: --check counts its own variants (hand, trainer, trainer+callbacks): drop the names")
    variants = CHECKED if check else ("hand", *[name for name in names if name != "hand"]) if names else known
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if missing:
        sys.exit(f"error: {missing[0]} not found: install valgrind (e.g. apt-get install valgrind)")
    # --check's three at once even on 2 cores: the counts do not depend on it, and it ends sooner on a shared machine
    workers = len(variants) if check else os.cpu_count() or 1
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        totals = dict(zip(variants, pool.map(lambda variant: count_in_valgrind(variant, keep), variants)))
    per_step = {name: total / (OFF - ON) for name, total in totals.items()}
    print(f"MLP 64-128-10, batch 64, 1 thread, callgrind: batches {ON}-{OFF - 1} of epoch {EPOCHS} "
          f"(epochs of {STEPS} batches)")
    print(f"{'variant':<20}{'instructions/step':>18}{'vs hand':>9}")
    for name in variants:
        print(f"{name:<20}{per_step[name]:>18,.0f}{per_step[name] / per_step['hand']:>9.4f}")
    if check:
        ratio = per_step["trainer"] / per_step["hand"]
        if ratio > GUARD:
            sys.exit(f"error: the bare trainer takes {ratio:.4f}x the hand-written loop's instructions per step "
                     f"({per_step['trainer']:,.0f} against {per_step['hand']:,.0f}), over the guard's {GUARD}: "
                     f"find what the step gained (--keep DIR at both commits, then bench/callgrind_functions.py) and "
                     f"take it out")
        print(f"guard: bare trainer {ratio:.4f}x the hand-written loop, within {GUARD}")


if __name__ == "__main__":
    inside_valgrind() if os.environ.get("BASETRAINER_BENCH_INSIDE_VALGRIND") else main(sys.argv[1:])
