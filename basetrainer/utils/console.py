"""Where basetrainer's own lines go: the console (the log's console lines, the progress bar, an entry point's error
line), kept apart, in a replica group's training process, from what libraries write to stderr.

Every replica group of a local job (:mod:`basetrainer.distributed.replica_groups`) shares the supervisor's console.
There a group's process shows basetrainer's lines, each tagged with its group (:func:`tag`), and sends everything
else written to stderr, by Python or C++ (torchft's and gloo's tracebacks and warnings when a peer dies, torchft's
checkpoint server's access lines, an uncaught error's traceback), to the group's log file (:func:`keep_apart`).
Elsewhere the console is the process's stderr, as it is when each line is written.
"""
import os
import sys
import traceback

from ..errors import BaseTrainerError, one_line

#: The group's number, which the supervisor of replica groups sets in each group's processes.
REPLICA_GROUP_VARIABLE = "BASETRAINER_REPLICA_GROUP"

_console = None  # the console, once stderr goes to a group's log file


def stream():
    """The stream basetrainer's own lines go to."""
    return _console if _console is not None else sys.stderr


def tag() -> str:
    """The tag of a line written in a process of a replica group the supervisor started (``[replica group 1]`` and
    a space), else ""."""
    group = os.environ.get(REPLICA_GROUP_VARIABLE, "")
    return f"[replica group {group}] " if group else ""


def exit_with(error: BaseTrainerError):
    """Ends an entry point on ``error``: its one line on the console (``error: ...``, tagged in a replica group),
    and its exit code (an error whose code is 0 ends quietly: it said what it had to)."""
    if error.exit_code:
        print(f"{tag()}error: {one_line(error)}", file=stream())
    sys.exit(error.exit_code)


def keep_apart(path: str) -> None:
    """From now on what this process, and the processes it starts, write to stderr is appended to ``path`` (its
    folder made), and :func:`stream` is the console stderr was. An error that ends the process leaves its traceback
    in ``path`` and one line on the console. Once per process: later calls change nothing."""
    global _console
    if _console is not None:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    sys.stderr.flush()
    console = os.fdopen(os.dup(2), "w", buffering=1, encoding=getattr(sys.stderr, "encoding", None) or "utf-8",
                        errors="backslashreplace")
    log = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 2)  # C++ writes to the descriptor; Python's sys.stderr writes to it too
    os.close(log)
    _console = console
    sys.excepthook = _one_line_on_the_console(sys.excepthook, path)


def _one_line_on_the_console(previous, path: str):
    def hook(kind, error, trace):
        try:
            previous(kind, error, trace)  # the traceback, to stderr: the log file
        except OSError:  # a full disk under it: the console's line still says what ended the process
            pass
        if not issubclass(kind, KeyboardInterrupt):
            message = traceback.format_exception_only(kind, error)[-1].strip()
            _console.write(f"{tag()}error: {message} (the traceback is in {path})\n")

    return hook
