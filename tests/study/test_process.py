"""How a run's process ended, in the words of the study's table (the process itself is started in tests/e2e)."""
import signal

import pytest

from basetrainer.study.process import Outcome, last_error


@pytest.mark.parametrize("returncode, error, status", [
    (0, "", "ok"),
    (1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out of memory"),
    (1, "RuntimeError: DefaultCPUAllocator: can't allocate memory: allocate 99 bytes", "out of memory"),
    (2, "config key 'lr' expects a number > 0, got -1", "failed (exit 2): config key 'lr' expects a number > 0, "
                                                          "got -1"),
    (-signal.SIGKILL, "", "killed by SIGKILL (the kernel's out-of-memory killer, often)"),
    (-signal.SIGSEGV, "", "killed by SIGSEGV"),
])
def test_the_status_says_how_the_run_ended(returncode, error, status):
    assert Outcome(returncode, 1.0, error).status == status


def test_the_error_of_a_run_is_its_last_error_line(tmp_path):
    output = tmp_path / "output.log"
    output.write_text("epoch 1/2 done\nerror: data folder x: no such folder; give --train_data\n")
    assert last_error(str(output)) == "data folder x: no such folder; give --train_data"


def test_without_an_error_line_it_is_the_tracebacks_last_line(tmp_path):
    output = tmp_path / "output.log"
    output.write_text("Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n"
                      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB\n"
                      "[W1126 rank0]: a warning after it\n")
    assert last_error(str(output)) == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB"
