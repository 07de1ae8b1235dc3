"""Starting the worker processes: one per GPU (or CPU workers with gloo), a torchrun job, or SLURM tasks.

``launch`` decides how this process takes part:

- started by torchrun (RANK, WORLD_SIZE, LOCAL_RANK set) or as one of several SLURM tasks:
  spawn nothing, join the group the launcher made, run ``main_func``;
- ``distributed=False`` or one process in all: run ``main_func`` here;
- otherwise: spawn ``num_gpus_per_machine`` workers on this machine, each joining one
  group of ``num_machines * num_gpus_per_machine`` ranks (NCCL on GPUs, gloo on CPUs).

A worker that fails stops the others within seconds, and its error reaches the caller:
user-facing errors (``BaseTrainerError``) keep their type and one-line message, any
other error comes with that worker's traceback.
"""
import ctypes
import datetime
import errno
import inspect
import multiprocessing.connection
import os
import signal
import socket
import sys
import time
import traceback
from urllib.parse import urlparse

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from .. import errors
from ..errors import BaseTrainerError, LaunchError, one_line
from ..utils.log import get_logger
from . import comm, signals

logger = get_logger()

DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)
_KILL_GRACE_SECONDS = 5.0


def launch(main_func, num_gpus_per_machine, num_machines=1, machine_rank=0, dist_url="auto",
           distributed=True, args=(), timeout=DEFAULT_TIMEOUT):
    """Runs ``main_func(*args)`` in every process of the job; see the module docstring.

    ``timeout`` (seconds or a timedelta) bounds every collective: a rank that stops
    responding ends the job after that long. Called from a script's top level, a
    ``BaseTrainerError`` is printed as one line and exits with its code.
    """
    timeout = timeout if isinstance(timeout, datetime.timedelta) else datetime.timedelta(seconds=float(timeout))
    try:
        return _launch(main_func, int(num_gpus_per_machine), int(num_machines), int(machine_rank), dist_url,
                       distributed, tuple(args), timeout)
    except BaseTrainerError as e:
        if not _called_from_main_script():
            raise
        print(f"error: {one_line(e)}", file=sys.stderr)
        sys.exit(e.exit_code)


def _launch(main_func, num_gpus_per_machine, num_machines, machine_rank, dist_url, distributed, args, timeout):
    if _started_by_torchrun() or _started_by_slurm():
        return _run_in_existing_group(main_func, args, dist_url, timeout)
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
        logger.warning("no CUDA on this machine: running %d CPU processes with the gloo backend", num_gpus_per_machine)
    dist_url = _resolve_dist_url(dist_url, num_machines, machine_rank)
    _spawn(main_func, args, num_gpus_per_machine, world_size, machine_rank, dist_url, backend, timeout)


# ---------------------------------------------------------------------- joining an existing group
def _started_by_torchrun() -> bool:
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")) and not dist.is_initialized()


def _started_by_slurm() -> bool:
    return int(os.environ.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in os.environ and "RANK" not in os.environ


def _run_in_existing_group(main_func, args, dist_url, timeout):
    if _started_by_slurm():
        _export_slurm_env(dist_url)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if world_size <= 1:
        return main_func(*args)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    _init_process_group(backend, "env://", world_size, rank, timeout, store=_attempt_store(world_size, timeout))
    comm.set_local_rank(local_rank)
    try:
        return main_func(*args)
    finally:
        _destroy_process_group()


def _attempt_store(world_size, timeout):
    """torchrun's store, with this restart attempt's keys kept apart from earlier attempts'.

    After ``--max-restarts`` restarts a group, the agent's store still holds the
    addresses the dead workers published, and gloo may connect to those (connection
    refused); prefixing the keys with the attempt number avoids it. None when torchrun
    does not serve a store (then env:// makes one as usual).
    """
    env = os.environ
    if env.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or "TORCHELASTIC_RESTART_COUNT" not in env:
        return None
    store = dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), world_size, is_master=False, timeout=timeout)
    return dist.PrefixStore(f"/basetrainer/attempt_{env['TORCHELASTIC_RESTART_COUNT']}", store)


def _export_slurm_env(dist_url):
    """Maps SLURM's task variables onto torch's env:// variables."""
    env = os.environ
    env["RANK"], env["WORLD_SIZE"] = env["SLURM_PROCID"], env["SLURM_NTASKS"]
    env["LOCAL_RANK"] = env.get("SLURM_LOCALID", "0")
    per_node = env.get("SLURM_NTASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE") or env["SLURM_NTASKS"]
    env["LOCAL_WORLD_SIZE"] = per_node.split("(")[0].split(",")[0]
    if dist_url and str(dist_url).startswith("tcp://"):
        parsed = urlparse(dist_url)
        env["MASTER_ADDR"], env["MASTER_PORT"] = parsed.hostname, str(parsed.port)
    env.setdefault("MASTER_ADDR", _first_host(env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", "")))
    env.setdefault("MASTER_PORT", str(20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000))


def _first_host(nodelist: str) -> str:
    """The first host of a SLURM node list such as ``gpu[003-005,9],login1``."""
    if not nodelist:
        raise LaunchError("SLURM gave no node list: set MASTER_ADDR and MASTER_PORT, or pass dist_url='tcp://host:port'")
    head = nodelist.split(",")[0] if "[" not in nodelist.split(",")[0] else nodelist[: nodelist.index("]") + 1]
    if "[" not in head:
        return head
    prefix, ranges = head[: head.index("[")], head[head.index("[") + 1: -1]
    return prefix + ranges.split(",")[0].split("-")[0]


# ---------------------------------------------------------------------- spawning workers
def _resolve_dist_url(dist_url, num_machines, machine_rank) -> str:
    if dist_url in (None, "", "auto"):
        if num_machines != 1:
            raise LaunchError("dist_url='auto' works on one machine only; for several machines pass "
                              "dist_url='tcp://<address of machine 0>:<port>' on every machine")
        return f"tcp://127.0.0.1:{_free_port()}"
    parsed = urlparse(str(dist_url))
    if parsed.scheme != "tcp" or not parsed.hostname or not parsed.port:
        raise LaunchError(f"dist_url {dist_url!r} is not 'auto' or 'tcp://host:port'; e.g. tcp://127.0.0.1:29500")
    if machine_rank == 0 and _port_in_use(parsed.hostname, parsed.port):
        raise LaunchError(f"port {parsed.port} on {parsed.hostname} is already in use (another job?): "
                          f"pass dist_url='auto' or choose a free port")
    return str(dist_url)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_in_use(host: str, port: int) -> bool:
    # SO_REUSEADDR as the rendezvous store sets it: a port in TIME_WAIT is free, a listening one is not.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            return e.errno == errno.EADDRINUSE or "in use" in str(e).lower()  # not a local address: nothing to check here
    return False


def _spawn(main_func, args, nprocs, world_size, machine_rank, dist_url, backend, timeout):
    ctx = mp.get_context("spawn")
    reports = ctx.SimpleQueue()
    processes = [
        ctx.Process(target=_worker, daemon=False, args=(
            local_rank, reports, main_func, args, nprocs, world_size, machine_rank, dist_url, backend, timeout))
        for local_rank in range(nprocs)
    ]
    for p in processes:
        p.start()
    with signals.forwarding_to(processes):  # the workers save and stop
        try:
            failed, still_running = _wait_for_first_failure(processes)
        finally:
            _stop(processes)
    if failed is not None:
        raise _worker_error(failed, processes, still_running, _drain(reports), machine_rank * nprocs, timeout)


def _wait_for_first_failure(processes):
    """Waits until all workers exit (returns (None, [])) or one fails (returns its index and the live ones)."""
    pending = {p.sentinel: i for i, p in enumerate(processes)}
    while pending:
        for sentinel in multiprocessing.connection.wait(list(pending)):
            index = pending.pop(sentinel)
            processes[index].join()
            if processes[index].exitcode != 0:
                return index, [i for i, p in enumerate(processes) if p.is_alive()]
    return None, []


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


def _worker(local_rank, reports, main_func, args, nprocs, world_size, machine_rank, dist_url, backend, timeout):
    _die_with_parent()
    rank = machine_rank * nprocs + local_rank
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(nprocs))
    try:
        if backend == "nccl":
            torch.cuda.set_device(local_rank)  # before any collective, so NCCL binds the right GPU
        elif "OMP_NUM_THREADS" not in os.environ:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // nprocs))
        _init_process_group(backend, dist_url, world_size, rank, timeout)
        comm.set_local_rank(local_rank)
        main_func(*args)
    except BaseException as e:  # noqa: B902 - every failure must reach the launcher
        reports.put((time.time(), rank, type(e).__name__, str(e), traceback.format_exc()))
        sys.exit(e.exit_code if isinstance(e, BaseTrainerError) else 1)
    finally:
        _destroy_process_group()


def _worker_error(failed, processes, still_running, reports, first_rank, timeout):
    """The error to raise in the launcher for a failed job: the earliest failure's own."""
    if not reports:
        code = processes[failed].exitcode
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        hint = " (out of memory?)" if code == -signal.SIGKILL else ""
        return LaunchError(f"worker rank {first_rank + failed} {how}{hint} without reporting an error")
    _, rank, type_name, message, trace = min(reports)
    error_type = getattr(errors, type_name, None)
    if isinstance(error_type, type) and issubclass(error_type, BaseTrainerError):
        message = one_line(error_type(message))
        return error_type(message if message.startswith("rank ") else f"rank {rank}: {message}")
    if any(word in (message + type_name).lower() for word in ("timed out", "timeout")):  # gloo words it both ways
        silent = [first_rank + i for i in still_running]
        who = f"rank(s) {silent} stopped responding" if silent else "another rank stopped responding"
        return LaunchError(f"rank {rank}: a collective timed out after {timeout.total_seconds():.0f}s: {who}; "
                           f"raise dist_timeout if they are only slow")
    return WorkerFailed(f"worker rank {rank} failed with {type_name}: {message}\n\n"
                        f"-- traceback of rank {rank} --\n{trace}")


class WorkerFailed(RuntimeError):
    """A worker raised an error that is not a ``BaseTrainerError``; the message holds its traceback."""


def _drain(queue):
    items = []
    while not queue.empty():
        items.append(queue.get())
    return items


def _die_with_parent():
    # If the launcher is killed outright, its workers must not live on holding GPUs and ports.
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass


# ---------------------------------------------------------------------- process group
def _init_process_group(backend, init_method, world_size, rank, timeout, store=None):
    try:
        if store is not None:
            dist.init_process_group(backend, store=store, world_size=world_size, rank=rank, timeout=timeout)
        else:
            dist.init_process_group(backend, init_method=init_method, world_size=world_size, rank=rank,
                                    timeout=timeout)
    except (RuntimeError, ValueError) as e:
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "address already in use" in str(e).lower():
            raise LaunchError(f"{init_method}: the port is already in use (another job?); "
                              f"pass dist_url='auto' or choose a free port") from None
        raise LaunchError(f"rank {rank} could not join the process group at {init_method} ({text}); "
                          f"check the address and that every machine can reach it") from None


def _destroy_process_group():
    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - leaving after a failure must not mask the failure
            pass


def _called_from_main_script() -> bool:
    """Whether ``launch`` was called from the top level of the script being run."""
    frame = inspect.currentframe()
    caller = frame.f_back.f_back if frame is not None and frame.f_back is not None else None
    return caller is not None and caller.f_globals.get("__name__") == "__main__" and caller.f_code.co_name == "<module>"
