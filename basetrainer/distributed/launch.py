"""Starting the worker processes: one per GPU (or CPU workers with gloo), a torchrun job, or SLURM tasks.

``launch`` decides how this process takes part:

- given a config (a mapping among ``args``) whose ``fault_tolerance.replica_groups`` is set and ``group_id`` null:
  train nothing, supervise the replica groups, running this command once per group
  (:mod:`basetrainer.distributed.replica_groups`);
- in a process group made already (Ray Train's workers, :mod:`basetrainer.integrations.ray`): spawn
  nothing, adopt that group, run ``main_func``;
- started by torchrun (RANK, WORLD_SIZE, LOCAL_RANK set) or as one of several SLURM tasks:
  spawn nothing, join the group the launcher made, run ``main_func``;
- ``distributed=False`` or one process in all: run ``main_func`` here;
- otherwise: spawn ``num_gpus_per_machine`` workers on this machine, each joining one group of
  ``num_machines * num_gpus_per_machine`` ranks (NCCL on GPUs, gloo on CPUs).

A worker that fails stops the others within seconds, and its error reaches the caller: user-facing errors
(``BaseTrainerError``) keep their type and one-line message, any other error comes with that worker's traceback. A
worker that finished its work counts as done even if something kills it while it exits, and workers exit without
the interpreter's finalization (see ``_exit_now``). Across machines, gloo uses the interface ``interfaces.py`` chooses.
"""
import ast
import atexit
import contextlib
import datetime
import gc
import inspect
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import traceback

import torch
import torch.multiprocessing as mp

from ..errors import BaseTrainerError, LaunchError, disk_full
from ..utils.console import exit_with
from ..utils.log import REPLICA_GROUP_VARIABLE, get_logger
from . import comm, replica_groups, signals, watchdog
from .children import die_with_parent, how_it_ended
from .failures import FINISHED, worker_error
from .interfaces import choose_gloo_interface
from .process_group import (
    destroy_process_group,
    init_process_group,
    join_store,
    resolve_dist_url,
    run_in_adopted_group,
    run_in_existing_group,
    started_by_slurm,
    started_by_torchrun,
    started_in_a_group,
)
from .threads import choose_threads

logger = get_logger()

DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)
_KILL_GRACE_SECONDS = 5.0


def launch(main_func, num_gpus_per_machine, num_machines=1, machine_rank=0, dist_url="auto",
           distributed=True, args=(), timeout=DEFAULT_TIMEOUT):
    """Runs ``main_func(*args)`` in every process of the job; see the module docstring.

    ``timeout`` (seconds or a timedelta) bounds every collective: a rank that stops
    responding ends the job after that long. Called from a script's top level, a
    ``BaseTrainerError`` is printed as one line and exits with its code.

    One process in all runs ``main_func`` here and returns what it returns; a script passes
    ``len(cfg.gpu_id)`` and its config, as ``examples/example.py`` does::

        >>> from basetrainer import launch
        >>> def main(lr, batch_size):
        ...     return lr * batch_size / 64
        >>> launch(main, num_gpus_per_machine=1, args=(0.1, 128))
        0.2
    """
    caller = inspect.currentframe().f_back
    timeout = timeout if isinstance(timeout, datetime.timedelta) else datetime.timedelta(seconds=float(timeout))
    try:
        return _launch(main_func, int(num_gpus_per_machine), int(num_machines), int(machine_rank), dist_url,
                       distributed, tuple(args), timeout, caller)
    except Exception as e:  # noqa: BLE001 - a full disk, wherever a write found it, is the user's to fix
        user = e if isinstance(e, BaseTrainerError) else disk_full(e)
        if user is None:
            raise
        if not _at_top_level_of(caller, "__main__", "__mp_main__"):
            raise user from (None if user is e else e)
        exit_with(user)


def _launch(main_func, num_gpus_per_machine, num_machines, machine_rank, dist_url, distributed, args, timeout,
            caller):
    if (fault_tolerance := replica_groups.settings_to_supervise(args, num_machines)) is not None:
        return replica_groups.supervise(fault_tolerance)
    if started_in_a_group():
        return run_in_adopted_group(main_func, args)
    if started_by_torchrun() or started_by_slurm():
        return run_in_existing_group(main_func, args, dist_url, timeout)
    world_size = num_machines * num_gpus_per_machine
    if not distributed or world_size <= 1:
        return main_func(*args)
    if torch.cuda.is_available():
        available = torch.cuda.device_count()
        if num_gpus_per_machine > available:
            raise LaunchError(f"asked for {num_gpus_per_machine} GPUs per machine but this machine has {available}; "
                              f"lower gpu_id / num_gpus_per_machine to at most {available}")
        backend = "nccl"
    else:
        backend = "gloo"
    _check_main_guard(caller)
    dist_url, store = resolve_dist_url(dist_url, num_machines, machine_rank, world_size, timeout)  # held to the end
    interface = choose_gloo_interface(dist_url, num_machines > 1)  # the workers inherit GLOO_SOCKET_IFNAME
    cpu = backend == "gloo" and f"no CUDA on this machine: running {num_gpus_per_machine} CPU processes"
    if cpu or interface:
        logger.warning("%s", "; ".join(line for line in (cpu and cpu + " with the gloo backend", interface) if line))
    _spawn(main_func, args, num_gpus_per_machine, world_size, machine_rank, dist_url, backend, timeout,
           hosted=store is not None)


def _spawn(main_func, args, nprocs, world_size, machine_rank, dist_url, backend, timeout, hosted=False):
    ctx = _worker_context()
    reports = ctx.SimpleQueue()
    # The workers start their own processes as the user's would (e.g. DataLoader workers forked on
    # Linux), not with the method that started them.
    start_method, environ = multiprocessing.get_start_method(), dict(os.environ)
    processes = [
        ctx.Process(target=_worker, daemon=False, args=(
            local_rank, reports, main_func, args, nprocs, world_size, machine_rank, dist_url, backend, timeout,
            start_method, hosted, environ))
        for local_rank in range(nprocs)
    ]
    for p in processes:
        p.start()
    first_rank = machine_rank * nprocs
    with signals.forwarding_to(processes):  # the workers save and stop
        try:
            failed, still_running, received = _wait_for_first_failure(processes, reports, first_rank)
        finally:
            _stop(processes)
    if failed is not None:
        raise worker_error(failed, processes, still_running, received + _drain(reports), first_rank, timeout)


# Imported once by the server the workers fork from, when this process has imported their package
# (torch._dynamo: building any optimizer imports it).
_PRELOADED = ("torch", "torch._dynamo", "torchvision", "basetrainer.engine.trainer")


def _worker_context():
    """Workers start fresh, as with "spawn" (no CUDA state, locks or threads of this process; the
    main script imported again as ``__mp_main__``), but fork from a server process that imported
    torch once ("forkserver"), so that each one does not spend seconds importing it again."""
    if sys.platform == "win32":
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([name for name in _PRELOADED if name.partition(".")[0] in sys.modules])
    return ctx


def _wait_for_first_failure(processes, reports, first_rank):
    """Waits until all workers exit (returns (None, [], reports)) or one fails (returns its index, the
    live ones and the reports so far). A worker that reported its work finished and then died
    while exiting is done, with a warning."""
    pending, received = {p.sentinel: i for i, p in enumerate(processes)}, []
    while pending:
        for sentinel in multiprocessing.connection.wait(list(pending)):
            index = pending.pop(sentinel)
            processes[index].join()
            received += _drain(reports)
            code, rank = processes[index].exitcode, first_rank + index
            if code != 0 and any(report[1:3] == (rank, FINISHED) for report in received):
                logger.warning("worker rank %d finished its work, then %s while exiting; its work stands", rank,
                               how_it_ended(code))
            elif code != 0:
                return index, [i for i, p in enumerate(processes) if p.is_alive()], received
    return None, [], received


def _stop(processes):
    """Interrupts live workers (so their ``finally`` blocks run), then kills what is left."""
    for p in processes:
        if p.is_alive():
            os.kill(p.pid, signal.SIGINT)
    deadline = time.monotonic() + _KILL_GRACE_SECONDS
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in processes:
        if p.is_alive():
            p.kill()
            p.join()


def _worker(local_rank, reports, main_func, args, nprocs, world_size, machine_rank, dist_url, backend, timeout,
            start_method, hosted, environ):
    die_with_parent()
    os.environ.clear()  # the launcher's, as it was at launch (the server started at the first one)
    os.environ.update(environ)
    multiprocessing.set_start_method(start_method, force=True)
    rank = machine_rank * nprocs + local_rank
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(nprocs))
    watchdog.report_to(lambda message: reports.put((time.time(), rank, "WatchdogTimeout", message, "")))
    code = 0
    try:
        if backend == "nccl":
            torch.cuda.set_device(local_rank)  # before any collective, so NCCL binds the right GPU
        elif "OMP_NUM_THREADS" not in os.environ:  # a trainer's build() looks again at what others keep busy
            torch.set_num_threads(choose_threads(None, nprocs)[0])
        store = join_store(dist_url, world_size, timeout) if hosted else None
        init_process_group(backend, dist_url, world_size, rank, timeout, store=store)
        comm.set_local_rank(local_rank)
        main_func(*args)
        reports.put((time.time(), rank, FINISHED, "", ""))
    except BaseException as e:  # noqa: B902 - every failure must reach the launcher
        code = _report_failure(e, rank, reports)
    finally:
        destroy_process_group()
    _exit_now(code)


def _report_failure(error, rank, reports) -> int:
    """Sends a worker's failure to the launcher; the worker's exit code. The launcher's stop (SIGINT: another rank
    failed first) is ignored from here: it would raise out of the report, and multiprocessing print a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    trace = traceback.format_exc()
    error = disk_full(error) or error
    reports.put((time.time(), rank, type(error).__name__, str(error), trace))
    code = error.exit_code if isinstance(error, BaseTrainerError) else 1
    if code and os.environ.get(REPLICA_GROUP_VARIABLE) and not isinstance(error, BaseTrainerError):
        with contextlib.suppress(OSError):  # a full disk under the log file must not hide the report
            print(trace, file=sys.stderr, flush=True)  # the group's log file: its launcher says one line
    return code


def _exit_now(code):
    """Ends a worker with ``code``, without the interpreter's finalization.

    DDP keeps its process group alive past ``destroy_process_group`` (until the process ends), and a gloo worker
    thread may still hold a finished collective's tensors. If it drops the last reference to one that Python also
    held while the interpreter finalizes, it needs the GIL, Python ends that thread (pthread_exit), and the
    unwinding through C++ aborts the process: "terminate called without an active exception", SIGABRT, after all the
    job's work was done. So the worker does what finalization would do for it, in its order
    (``threading._shutdown``: the thread pools' exit hooks, which stop the pools that libraries leave running,
    torch.compile's among them, then waiting for the threads that are left; the atexit handlers, multiprocessing's
    among them; collecting what is left, which closes forgotten files; flushing) and leaves with ``os._exit``, as
    forked multiprocessing workers always do.
    """
    threading._shutdown()  # what the interpreter runs first when it exits
    atexit._run_exitfuncs()
    gc.collect()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _drain(queue):
    return [queue.get() for _ in iter(queue.empty, True)]  # until empty() says True


def _check_main_guard(caller):
    """Spawned workers import the main script again: a ``launch`` call at its top level that is
    not under ``if __name__ == "__main__":`` would run once more in every worker."""
    if _at_top_level_of(caller, "__mp_main__"):  # this is such a worker, importing the script
        exit_with(LaunchError(_UNGUARDED))
    if _at_top_level_of(caller, "__main__") and not _under_main_guard(caller):
        raise LaunchError(_UNGUARDED)


_UNGUARDED = ('launch() is called at the top level of the script without a guard: spawned workers import the '
              'script again; put the call under if __name__ == "__main__":')


def _at_top_level_of(frame, *module_names) -> bool:
    return frame is not None and frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") in module_names


def _under_main_guard(frame) -> bool:
    """Whether the line ``frame`` runs is inside a top-level ``if __name__ == "__main__":`` of its file
    (True when the source cannot be read: then nothing is claimed)."""
    try:
        with open(frame.f_globals["__file__"], encoding="utf-8") as source:
            tree = ast.parse(source.read())
    except (KeyError, OSError, SyntaxError, UnicodeDecodeError):
        return True
    guards = [node for node in tree.body if isinstance(node, ast.If)
              and ast.unparse(node.test).replace("'", '"') in ('__name__ == "__main__"', '"__main__" == __name__')]
    return any(node.lineno <= frame.f_lineno <= node.end_lineno for node in guards)
