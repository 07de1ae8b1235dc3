"""Fixtures every folder shares, and the rule of the two tiers.

``python -m pytest -m "not slow" -n auto`` is the fast tier: it starts no process and trains nothing
end to end. A test is marked ``slow`` automatically when it lives in ``tests/e2e/`` or uses a
fixture that runs a job (``SLOW_FIXTURES``); any other test that starts a process, itself or
in a fixture it sets up, fails with a line saying to mark it (see :func:`pytest_runtest_setup`).
"""
import collections
import logging
import multiprocessing
import os
import subprocess

import pytest
import torch

from support.processes import TINY, run_python
from support.zygote import Zygote

# Fixtures that run jobs: a test that uses one is slow.
SLOW_FIXTURES = {"tiny", "uninterrupted", "one_process_run", "two_process_run", "pruned_run", "mlflow_run",
                 "wandb_run", "killed_in_save", "evaluating_every_4_steps", "one_and_two_processes",
                 "accumulating_run", "batchnorm_run", "trained"}
SLOW_FOLDERS = {"e2e"}


def pytest_configure(config):
    """Builds matplotlib's font cache before any test runs: on a machine where it is missing, the first plot
    runs ``fc-list``, which the fast tier's guard would take for a test starting a process."""
    try:
        from matplotlib import font_manager
    except ImportError:
        return
    font_manager.findfont("DejaVu Sans")


def pytest_collection_modifyitems(config, items):
    for item in items:
        folder = item.path.parent.name
        if folder in SLOW_FOLDERS or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    # The files with the most slow tests first (each file's tests in their order): under pytest-xdist's
    # --dist loadfile the long files start first and the short ones fill in at the end.
    slow_tests = collections.Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow_tests[item.path])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    """A test that is not marked slow may not start a process (a subprocess, a multiprocessing or
    torch.multiprocessing worker), nor may the fixtures it sets up: it fails naming the rule
    instead, so the fast tier stays fast. The guard stands from setup to teardown."""
    if item.get_closest_marker("slow"):
        yield
        return
    guard = pytest.MonkeyPatch()

    def refuse(*args, **kwargs):
        raise AssertionError(f"{item.nodeid} starts a process: mark it @pytest.mark.slow (the fast tier starts none)")

    guard.setattr(subprocess.Popen, "__init__", refuse)
    guard.setattr(multiprocessing.process.BaseProcess, "start", refuse)
    guard.setattr(Zygote, "run", refuse)
    item.stash[_GUARD] = guard
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield
    guard = item.stash.get(_GUARD, None)
    if guard is not None:
        guard.undo()


_GUARD = pytest.StashKey()


@pytest.fixture
def tiny():
    """Runs tests/support/workers/tiny.py with the given flags; fails the test if it fails, unless check=False."""

    def run(*flags, check=True, timeout=240, env=None):
        result = run_python([TINY, *map(str, flags)], timeout=timeout, env=env)
        if check and result.returncode != 0:
            pytest.fail(f"tiny.py {' '.join(map(str, flags))} exited {result.returncode}:\n{result.stderr[-4000:]}")
        return result

    return run


# The "basetrainer" logger as no run has configured it yet (set_logger stops its propagation to the root logger,
# where caplog listens).
_LOGGER = logging.getLogger("basetrainer")
_PRISTINE_LOGGER = (list(_LOGGER.handlers), _LOGGER.level, _LOGGER.propagate)


@pytest.fixture(autouse=True)
def restore_basetrainer_logger():
    """Runs in this process configure the process-wide "basetrainer" logger: after each test it is put back as it
    was before any run, also when a module fixture that trained in this process configured it before the test
    began (the next file on the same test process would otherwise capture no log records)."""
    yield
    handlers, level, propagate = _PRISTINE_LOGGER
    for handler in _LOGGER.handlers:
        if handler not in handlers:
            handler.close()
    _LOGGER.handlers[:], _LOGGER.level, _LOGGER.propagate = list(handlers), level, propagate


@pytest.fixture(scope="session")
def uninterrupted(tmp_path_factory):
    """Reference runs of tests/support/workers/tiny.py that never fail, in 1 and 2 processes, checkpointing
    every 2 steps: ``<root>/p1.pt`` and ``<root>/p2.pt``."""
    root = tmp_path_factory.mktemp("uninterrupted")
    for procs in (1, 2):
        result = run_python([TINY, "--procs", procs, "--work-dir", root / f"p{procs}", "--out", root / f"p{procs}.pt",
                             "--every-n-iters", 2])
        assert result.returncode == 0, result.stderr[-3000:]
    return root


@pytest.fixture(scope="session")
def tiny_text_models(tmp_path_factory):
    """The tiny Llama-, Qwen2- and GPT-2-like models with their tokenizers, each a save_pretrained folder (built
    once per test process, nothing fetched): ``{"llama": folder, "qwen2": folder, "gpt2": folder}``."""
    from basetrainer.tasks.text.tiny_models import ARCHITECTURES, write_tiny_model

    root = tmp_path_factory.mktemp("tiny_text_models")
    return {architecture: write_tiny_model(root / architecture, architecture) for architecture in ARCHITECTURES}


# The machines that run the suite have 2 cores shared by everything: one thread per test process, also for the
# trainers built in it (a trainer follows OMP_NUM_THREADS, else it takes the cores other work leaves free).
os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)
