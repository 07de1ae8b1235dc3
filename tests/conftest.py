import logging
import os
import socket
import subprocess
import sys

import pytest
import torch

TESTS = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(TESTS, "workers", "tiny.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_python(args, timeout=240, env=None, cwd=None):
    """Runs ``python args...`` with one thread per process; returns the CompletedProcess."""
    full_env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=full_env, cwd=cwd or TESTS)


@pytest.fixture
def tiny():
    """Runs tests/workers/tiny.py with the given flags; fails the test if it fails, unless check=False."""

    def run(*flags, check=True, timeout=240, env=None):
        result = run_python([TINY, *map(str, flags)], timeout=timeout, env=env)
        if check and result.returncode != 0:
            pytest.fail(f"tiny.py {' '.join(map(str, flags))} exited {result.returncode}:\n{result.stderr[-4000:]}")
        return result

    return run


@pytest.fixture(autouse=True)
def restore_basetrainer_logger():
    """Runs in this process configure the process-wide "basetrainer" logger: put it back for the next test."""
    logger = logging.getLogger("basetrainer")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield
    for handler in logger.handlers:
        if handler not in saved[0]:
            handler.close()
    logger.handlers[:], logger.level, logger.propagate = saved


@pytest.fixture(scope="session")
def uninterrupted(tmp_path_factory):
    """Reference runs of tests/workers/tiny.py that never fail, in 1 and 2 processes, checkpointing every 2 steps:
    ``<root>/p1.pt`` and ``<root>/p2.pt``."""
    root = tmp_path_factory.mktemp("uninterrupted")
    for procs in (1, 2):
        result = run_python([TINY, "--procs", procs, "--work-dir", root / f"p{procs}", "--out", root / f"p{procs}.pt",
                             "--every-n-iters", 2])
        assert result.returncode == 0, result.stderr[-3000:]
    return root


def load_result(path):
    return torch.load(path, weights_only=False)


def same_weights(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# The machines that run the suite have 2 cores shared by everything: one thread per test process.
torch.set_num_threads(1)
