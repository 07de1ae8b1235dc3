"""Process groups: joining the one torchrun or SLURM made, adopting one another driver made (Ray Train's), the
rendezvous address, creating and destroying a group."""
import errno
import os
import socket
from urllib.parse import urlparse

import torch
import torch.distributed as dist

from ..errors import LaunchError
from ..utils.log import get_logger
from . import comm
from .interfaces import choose_gloo_interface

logger = get_logger()


def started_by_torchrun() -> bool:
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")) and not dist.is_initialized()


def started_by_slurm() -> bool:
    return int(os.environ.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in os.environ and "RANK" not in os.environ


def started_in_a_group() -> bool:
    """Whether this process already belongs to a default process group that someone else made and owns (Ray
    Train's workers: Ray sets RANK, LOCAL_RANK and WORLD_SIZE and initialises torch.distributed itself)."""
    return dist.is_available() and dist.is_initialized()


def run_in_adopted_group(main_func, args):
    """Runs ``main_func(*args)`` in the existing default group, as one of its ranks (the local rank from
    LOCAL_RANK); the group is left as it was, for its owner to destroy."""
    comm.set_local_rank(int(os.environ.get("LOCAL_RANK", 0)))
    return main_func(*args)


def run_in_existing_group(main_func, args, dist_url, timeout):
    if started_by_slurm():
        _export_slurm_env(dist_url)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if world_size <= 1:
        return main_func(*args)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    on_this_machine = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    interface = choose_gloo_interface(os.environ.get("MASTER_ADDR", ""), on_this_machine < world_size)
    if interface and local_rank == 0:  # the machine's start-up line
        logger.warning("the machine of ranks %d-%d: %s", rank, rank + on_this_machine - 1, interface)
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    init_process_group(backend, "env://", world_size, rank, timeout, store=_attempt_store(world_size, timeout))
    comm.set_local_rank(local_rank)
    try:
        return main_func(*args)
    finally:
        destroy_process_group()


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


def check_dist_url(dist_url) -> str:
    """``dist_url`` if it is ``auto`` or ``tcp://host:port`` (a port from 1 to 65535); else a one-line LaunchError."""
    if dist_url in (None, "", "auto"):
        return "auto"
    try:
        parsed = urlparse(str(dist_url))
        valid = parsed.scheme == "tcp" and parsed.hostname and parsed.port
    except ValueError:  # a port out of range, or a malformed IPv6 address
        valid = False
    if not valid:
        raise LaunchError(f"dist_url {dist_url!r} is not 'auto' or 'tcp://host:port'; e.g. tcp://127.0.0.1:29500")
    return str(dist_url)


def resolve_dist_url(dist_url, num_machines, machine_rank, world_size, timeout):
    """``(url, store)``: where the job's processes meet. For ``auto`` (one machine only), the launcher serves
    the rendezvous store itself on a port the system gives it (``store``, to hold until the job ends; the
    workers join it with :func:`join_store`): no other job can take the port between its choice and the
    workers joining, as it could a port found free. Otherwise the URL given, checked, and no store."""
    if dist_url in (None, "", "auto"):
        if num_machines != 1:
            raise LaunchError("dist_url='auto' works on one machine only; for several machines pass "
                              "dist_url='tcp://<address of machine 0>:<port>' on every machine")
        store = dist.TCPStore("127.0.0.1", 0, world_size, is_master=True, timeout=timeout, wait_for_workers=False)
        return f"tcp://127.0.0.1:{store.port}", store
    parsed = urlparse(check_dist_url(dist_url))
    if machine_rank == 0 and _port_in_use(parsed.hostname, parsed.port):
        raise LaunchError(f"port {parsed.port} on {parsed.hostname} is already in use (another job?): "
                          f"pass dist_url='auto' or choose a free port")
    return str(dist_url), None


def join_store(dist_url: str, world_size: int, timeout):
    """A worker's connection to the store the launcher serves at ``dist_url`` (see :func:`resolve_dist_url`)."""
    parsed = urlparse(dist_url)
    return dist.TCPStore(parsed.hostname, parsed.port, world_size, is_master=False, timeout=timeout)


def _port_in_use(host: str, port: int) -> bool:
    # SO_REUSEADDR as the rendezvous store sets it: a port in TIME_WAIT is free, a listening one is not.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            return e.errno == errno.EADDRINUSE or "in use" in str(e).lower()  # not a local address: nothing to check here
    return False


def init_process_group(backend, init_method, world_size, rank, timeout, store=None):
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


def destroy_process_group():
    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - leaving after a failure must not mask the failure
            pass
