"""How many threads a training process's operators use (torch's intra-op threads), when ``OMP_NUM_THREADS`` does not
say: the usable cores that other work leaves free, shared among this machine's training processes.

torch starts as many threads as the machine has cores, and OpenMP's threads spin while they wait for each other.
With the cores to themselves that is the fastest; beside another job it is the slowest setting there is: a thread
that has to wait for one the other job preempted spins on the core the others need (the quick start on 2 cores
beside one busy process: 127 samples/s with 2 threads, 244 with 1; beside a documentation build, 17 against 229).
So a process counts what the rest of the machine keeps busy while it is being built (:class:`CoreUse`, from
``/proc/stat`` and its own CPU time; at most a tenth of a second of waiting), and takes the cores left, at least
one, at most its share of the cores torch would use (the physical cores it may run on, shared by
``LOCAL_WORLD_SIZE`` processes on this machine); while it trains, :class:`basetrainer.engine.threads.ThreadCount`
looks again. ``OMP_NUM_THREADS`` set overrides all of it (for runs that must end bitwise equal: float sums depend
on the number of threads), as does a ``torch.set_num_threads`` call after the trainer is built;
``bench/threads.py`` measures the settings.
"""
import os
import time

import torch

_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user, nice, system, irq, softirq, steal (another VM's)
_MIN_WINDOW_S = 0.1  # a shorter look at the machine says little


def usable_cores() -> int:
    """The cores this process may run on (its affinity), else the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def compute_cores() -> int:
    """The physical cores among the usable ones (hyper-threads of one core counted once), as torch counts its
    default threads; the usable cores where the topology cannot be read."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    cores = set()
    for cpu in cpus:
        topology = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
        try:
            with open(topology + "physical_package_id", encoding="ascii") as package, \
                    open(topology + "core_id", encoding="ascii") as core:
                cores.add((package.read().strip(), core.read().strip()))
        except OSError:
            return len(cpus)
    return max(1, len(cores))


def local_processes() -> int:
    """This job's training processes on this machine (``LOCAL_WORLD_SIZE``, set by launch, torchrun, SLURM)."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


class CoreUse:
    """How many of the usable cores other processes kept busy since it was made (None where ``/proc/stat`` is not
    there): the busy time of those cores less this process's own CPU time, over the wall-clock time."""

    def __init__(self):
        self.cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        self.start = self._sample()

    def _sample(self):
        busy = _busy_seconds(self.cores)
        return None if busy is None else (busy, time.process_time(), time.monotonic())

    def elsewhere(self):
        """Cores busy with other work since then (a float; None when unknown)."""
        if self.start is None:
            return None
        waited = time.monotonic() - self.start[2]
        if waited < _MIN_WINDOW_S:
            time.sleep(_MIN_WINDOW_S - waited)
        end = self._sample()
        if end is None:
            return None
        wall = end[2] - self.start[2]
        return max(0.0, ((end[0] - self.start[0]) - (end[1] - self.start[1])) / wall)


def _busy_seconds(cores):
    """Busy CPU seconds of ``cores`` (all when None) since boot, from ``/proc/stat``; None where it cannot be read."""
    try:
        with open("/proc/stat", encoding="ascii") as stream:
            lines = stream.read().splitlines()
    except OSError:
        return None
    wanted = None if cores is None else {f"cpu{core}" for core in cores}
    ticks = 0
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name != "cpu" and (wanted is None or name in wanted):
            ticks += sum(int(fields[index]) for index in _BUSY_FIELDS if index < len(fields))
    return ticks / os.sysconf("SC_CLK_TCK")


def choose_threads(elsewhere, processes: int, cores=None, cpus=None) -> tuple:
    """``(threads, why)`` for a process given ``elsewhere`` usable CPUs busy with other work (None: unknown or not
    to be looked at) and ``processes`` training processes on the machine (the others among them count as other
    work); ``cores`` (physical, default :func:`compute_cores`) and ``cpus`` (logical, :func:`usable_cores`)."""
    cores = compute_cores() if cores is None else cores
    cpus = usable_cores() if cpus is None else cpus
    share = max(1, cores // processes)
    if elsewhere is None:
        return share, f"{cores} cores / {processes} process{'es' if processes > 1 else ''}"
    busy = elsewhere * cores / cpus  # in cores: a hyper-thread busy elsewhere takes part of one
    free = max(1, round(cores - busy))
    if free >= share:
        return share, f"{cores} cores / {processes} process{'es' if processes > 1 else ''}, {busy:.1f} busy elsewhere"
    return free, f"{cores} cores, {busy:.1f} busy with other work"


def set_process_threads(core_use, adapt: bool = True) -> tuple:
    """Sets torch's intra-op threads for this process as the module docstring says, from what ``core_use`` (a
    :class:`CoreUse`) saw unless not ``adapt`` (then the process's share of the cores, whatever the load); returns
    ``(threads, why)``."""
    if os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads(), "OMP_NUM_THREADS"
    threads, why = choose_threads(core_use.elsewhere() if adapt else None, local_processes())
    if threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    return threads, why
