"""What starting a job costs: the wall time and the CPU time of every process of a ``launch`` of N CPU
workers, each building a small model and its SGD optimizer and taking one step, with the workers
forked from launch's forkserver (what launch does) and, for comparison, spawned (each worker imports
torch, torch._dynamo and the trainer itself).

    python bench/launch.py [--procs 2 4] [--repeat 3]

Linux only: the CPU time is the machine's (from /proc/stat) while the job runs, so run it on an
otherwise idle machine. Figures: bench/RESULTS.md, "Starting a job".
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

JOB = '''
import sys
import multiprocessing
import torch
from basetrainer.distributed import launch as launching

def main():
    model = torch.nn.Linear(64, 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # imports torch._dynamo, as any optimizer does
    model(torch.randn(8, 64)).sum().backward()
    optimizer.step()

if __name__ == "__main__":
    if sys.argv[2] == "spawn":
        launching._worker_context = lambda: multiprocessing.get_context("spawn")
    launching.launch(main, int(sys.argv[1]))
'''


def busy_seconds() -> float:
    with open("/proc/stat") as stat:
        user, nice, system = (int(field) for field in stat.readline().split()[1:4])
    return (user + nice + system) / os.sysconf("SC_CLK_TCK")


def run(script, procs, method):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cpu, start = busy_seconds(), time.perf_counter()
    subprocess.run([sys.executable, script, str(procs), method], check=True, env=env, capture_output=True)
    return time.perf_counter() - start, busy_seconds() - cpu


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--procs", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        script = os.path.join(folder, "job.py")
        with open(script, "w") as file:
            file.write(JOB)
        print("| workers | start | wall (s) | CPU of all processes (s) |")
        print("| --- | --- | --- | --- |")
        for procs in args.procs:
            for method in ("forkserver", "spawn"):
                runs = sorted(run(script, procs, method) for _ in range(args.repeat))
                wall, cpu = runs[len(runs) // 2]  # the median run, by wall time
                print(f"| {procs} | {method} | {wall:.2f} | {cpu:.1f} |")


if __name__ == "__main__":
    main()
