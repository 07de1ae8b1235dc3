"""The processes the engine starts (launch()'s workers, the replica groups' commands, a study's runs): each dies with
the process that started it, and how one ended is told the same way wherever it is told.

Below :mod:`basetrainer.distributed.launch` and :mod:`basetrainer.distributed.replica_groups`, which both need it
(launch() runs the supervisor of the replica groups, and the supervisor starts commands that die with it as launch()'s
workers do).
"""
import ctypes
import signal
import sys


def die_with_parent() -> None:
    """On Linux, has the kernel kill this process when its parent dies (``PR_SET_PDEATHSIG``): a launcher, a
    supervisor or a study killed outright must not leave its workers, groups or runs holding GPUs and ports."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass


def how_it_ended(exit_code: int) -> str:
    """``exited with code 1``, or for a process killed by a signal (a negative ``exit_code``, as ``subprocess`` and
    ``multiprocessing`` give it) ``was killed by SIGKILL``."""
    if exit_code >= 0:
        return f"exited with code {exit_code}"
    number = -exit_code
    return f"was killed by {signal.Signals(number).name if number in signal.valid_signals() else f'signal {number}'}"


def guessed_cause(exit_code: int) -> str:
    """What may have ended a process that reported nothing, worded as a guess (as the end of a sentence), or "".
    SIGKILL is what the kernel's out-of-memory killer sends, and also what ``kill -9`` or a scheduler sends."""
    if exit_code == -signal.SIGKILL:
        return "; if nobody killed it, the machine perhaps ran out of memory (the kernel's OOM killer sends SIGKILL)"
    return ""
