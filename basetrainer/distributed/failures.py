"""How a job's failure reads in its launcher: from the workers' reports and exit codes, the one error to raise.

A worker that died without reporting is that failure (:class:`WorkerLost`); a user-facing error keeps its type and
one line; a collective that timed out names the ranks that stopped responding; a peer on another machine that went
away (its connection closed or reset) is :class:`MachineLost`, exit code 75 as a saved stop's, for the scheduler to
requeue the job and ``resume: auto`` to continue from the last checkpoint; anything else comes with the worker's
traceback (:class:`WorkerFailed`).
"""
import os
import re

from .. import errors
from ..errors import BaseTrainerError, LaunchError, one_line
from ..utils.log import REPLICA_GROUP_VARIABLE
from .children import guessed_cause, how_it_ended

FINISHED = "finished"  # a worker's report that its work is done (not an error)
_PEER = re.compile(r"\[([0-9A-Fa-f.:]+)\]:\d+")  # gloo names a pair's peer "[10.0.0.2]:41234"
_GONE = re.compile(r"(?:reset|closed) by peer", re.IGNORECASE)


def worker_error(failed, processes, still_running, reports, first_rank, timeout):
    """The error to raise in the launcher for a failed job: the earliest failure's own. A worker that died without
    reporting an error before the others were stopped (killed) is that failure: what the others reported then (a
    peer's connection closed, the interruption that stopped them) followed from its death."""
    reports = [report for report in reports if report[2] != FINISHED]
    reported = {report[1] for report in reports}
    lost = [index for index, process in enumerate(processes) if index not in still_running
            and process.exitcode not in (0, None) and first_rank + index not in reported]
    if lost or not reports:
        index = failed if failed in lost or not lost else lost[0]
        code = processes[index].exitcode
        return WorkerLost(f"worker rank {first_rank + index} {how_it_ended(code)} without reporting an error"
                          f"{guessed_cause(code)}")
    _, rank, type_name, message, trace = min(reports)
    error_type = getattr(errors, type_name, None)
    if isinstance(error_type, type) and issubclass(error_type, BaseTrainerError):
        message = one_line(error_type(message))
        return error_type(message if message.startswith("rank ") else f"rank {rank}: {message}")
    peer = _PEER.search(message)
    in_a_group = os.environ.get(REPLICA_GROUP_VARIABLE)  # a group's processes share a machine; its supervisor restarts it
    if _GONE.search(message) and not in_a_group:
        where = f"at {peer.group(1)}" if peer else "of another rank"
        return MachineLost(f"rank {rank}: the machine {where} went away (its connection {_GONE.search(message)[0]} "
                           f"in a collective); rerun with resume: auto to go on from the last checkpoint")
    if any(word in (message + type_name).lower() for word in ("timed out", "timeout")):  # gloo words it both ways
        silent = [first_rank + i for i in still_running]
        who = (f"rank(s) {silent} stopped responding" if silent else
               f"the machine at {peer.group(1)} stopped responding" if peer else "another rank stopped responding")
        return LaunchError(f"rank {rank}: a collective timed out after {timeout.total_seconds():.0f}s: {who}; "
                           f"raise dist_timeout if they are only slow")
    if in_a_group:  # the console is the job's: the worker wrote its traceback to the log
        first = next((line.strip() for line in message.splitlines() if line.strip()), "")
        return GroupWorkerFailed(f"worker rank {rank} failed with {type_name}: {first} (its traceback is in the "
                                 f"replica group's log/train.log)")
    return WorkerFailed(f"worker rank {rank} failed with {type_name}: {message}\n\n"
                        f"-- traceback of rank {rank} --\n{trace}")


class WorkerFailed(RuntimeError):
    """A worker raised an error that is not a ``BaseTrainerError``; the message holds its traceback."""


class GroupWorkerFailed(LaunchError):
    """In a replica group: a worker raised an error that is not a ``BaseTrainerError``, said in one line (its traceback
    is in the group's log file). Exit code 1, a worker's failure: the supervisor restarts the group."""

    exit_code = 1


class WorkerLost(LaunchError):
    """A worker died without reporting an error (killed: the out-of-memory killer, a failing machine). Exit code 1,
    as a worker's own failure, not 2 (the user's input): a supervisor restarts such a replica group."""

    exit_code = 1


class MachineLost(LaunchError):
    """A worker's peer on another machine went away in a collective (its connection closed or reset: the machine was
    lost, or its processes killed). Exit code 75, as a saved stop's (EX_TEMPFAIL): a scheduler requeues the job, and
    ``resume: auto`` goes on from the last checkpoint."""

    exit_code = 75
