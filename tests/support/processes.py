"""The one way a test starts Python: :func:`run_python` (a command, with one thread per process; through
the zygote unless the test asks for a new Python), and :func:`popen_python` for the few tests that must
start several at once or signal the process, and :func:`wait_until` for what such processes should make."""
import os
import shutil
import socket
import subprocess
import sys
import time

from . import TESTS, WORKERS
from .zygote import Zygote

TINY = WORKERS / "tiny.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def python_env(env=None) -> dict:
    """The environment of a child Python: this one's, one thread per process, unbuffered output."""
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **(env or {}))


ZYGOTE = Zygote(python_env)


def run_python(args, timeout=240, env=None, cwd=None, check=False, fresh=False):
    """Runs ``python args...`` (a script and its arguments, ``-c code`` or ``-m module``) and returns the
    CompletedProcess with text output; ``check`` raises when it fails. The job runs in a child of the
    test process's zygote (:mod:`.zygote`: torch already imported), or in a new Python when it needs
    one or ``fresh`` asks for one (a test of what a job imports)."""
    args, env, cwd = [*map(str, args)], python_env(env), cwd or TESTS
    result = None if fresh else ZYGOTE.run(args, timeout, env, cwd)
    if result is None:
        result = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env,
                                cwd=cwd)
    if check:
        result.check_returncode()
    return result


def popen_python(args, env=None, cwd=None, **kwargs):
    """Starts ``python args...`` without waiting (several machines of one job, say); returns the Popen."""
    return subprocess.Popen([sys.executable, *map(str, args)], env=python_env(env), cwd=cwd or TESTS, **kwargs)


def wait_until(condition, processes=(), timeout=120, explain=lambda: ""):
    """Polls ``condition()`` every 0.1 s until it holds; fails with ``explain()`` when ``timeout`` seconds pass, or
    one of ``processes`` (Popens that should make it hold) ends first."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline and all(p.poll() is None for p in processes), explain()
        time.sleep(0.1)


def run_command(args, timeout=240, env=None, cwd=None):
    """Runs an installed command (``basetrainer ...``) as :func:`run_python` runs Python: the console script pip
    wrote, the file the user's shell runs, given to this environment's Python (in the zygote)."""
    args = [*map(str, args)]
    script = shutil.which(args[0])
    if script and _is_this_pythons_script(script):
        return run_python([script, *args[1:]], timeout=timeout, env=env, cwd=cwd)
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=python_env(env),
                          cwd=cwd or TESTS)


def _is_this_pythons_script(path) -> bool:
    """Whether ``path`` is a Python script that this Python runs (its ``#!`` line names it)."""
    with open(path, "rb") as stream:
        first = stream.readline().decode(errors="replace")
    return first.startswith("#!") and os.path.realpath(first[2:].strip()) == os.path.realpath(sys.executable)
