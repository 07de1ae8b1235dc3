"""The one way a test starts Python: :func:`run_python` (a command, with one thread per process), and
:func:`popen_python` for the few tests that must start several at once."""
import os
import socket
import subprocess
import sys

from . import TESTS, WORKERS

TINY = WORKERS / "tiny.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def python_env(env=None) -> dict:
    """The environment of a child Python: this one's, one thread per process, unbuffered output."""
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **(env or {}))


def run_python(args, timeout=240, env=None, cwd=None, check=False):
    """Runs ``python args...`` (a script and its arguments, ``-c code`` or ``-m module``) and returns the
    CompletedProcess with text output; ``check`` raises when it fails."""
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=python_env(env), cwd=cwd or TESTS, check=check)


def popen_python(args, env=None, cwd=None, **kwargs):
    """Starts ``python args...`` without waiting (several machines of one job, say); returns the Popen."""
    return subprocess.Popen([sys.executable, *map(str, args)], env=python_env(env), cwd=cwd or TESTS, **kwargs)


def run_command(args, timeout=240, env=None, cwd=None):
    """Runs an installed command (``basetrainer ...``, a console script that starts Python) as
    :func:`run_python` runs Python."""
    return subprocess.run([*map(str, args)], capture_output=True, text=True, timeout=timeout, env=python_env(env),
                          cwd=cwd or TESTS)
