"""One run of a study, in a Python process of its own: running out of memory, or a crash, ends that run only."""
import os
import signal
import subprocess
import time
from dataclasses import dataclass

from ..distributed.children import die_with_parent

STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}  # what stops a study (runner.py turns SIGTERM into Ctrl-C's error)
OUTPUT_FILE = "output.log"  # the run's stdout and stderr, in its work_dir
# What a run that ran out of memory prints: torch's errors on CUDA (and MPS), the allocator's on the CPU.
OUT_OF_MEMORY = ("OutOfMemoryError", "CUDA out of memory", "DefaultCPUAllocator: can't allocate memory",
                 "MPS backend out of memory")


@dataclass(frozen=True)
class Outcome:
    """How a run's process ended: its exit code (negative: killed by that signal), its wall-clock seconds from
    start to exit (start-up included), and its last ``error:`` line or traceback line when it failed."""

    returncode: int
    seconds: float
    error: str = ""

    @property
    def status(self) -> str:
        """``ok``, ``out of memory``, ``killed by SIGKILL`` or ``failed (exit 2): <its error line>``."""
        if self.returncode == 0:
            return "ok"
        if any(mark in self.error for mark in OUT_OF_MEMORY):
            return "out of memory"
        if self.returncode < 0:
            name = signal.Signals(-self.returncode).name if -self.returncode in signal.valid_signals() else "a signal"
            return f"killed by {name}" + (" (the kernel's out-of-memory killer, often)" if name == "SIGKILL" else "")
        return f"failed (exit {self.returncode})" + (f": {self.error}" if self.error else "")


def run_process(command, run_dir: str, env=None) -> Outcome:
    """Runs ``command`` with its output in ``run_dir``/output.log and waits for it.

    The process dies with the study (``PR_SET_PDEATHSIG`` on Linux), and when the study is stopped
    (Ctrl-C, SIGTERM) it is killed before the stop goes on: a run cut short is redone from scratch
    when the study starts again.
    """
    os.makedirs(run_dir, exist_ok=True)
    output = os.path.join(run_dir, OUTPUT_FILE)
    started = time.perf_counter()
    with open(output, "w", encoding="utf-8") as stream:
        # A stop signal is held while the process starts: its handler's KeyboardInterrupt, raised inside the
        # fork's hooks (a preexec_fn runs them), would be printed and dropped, and the run would go on.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            process = subprocess.Popen(command, stdout=stream, stderr=subprocess.STDOUT, env=env,
                                       preexec_fn=lambda: _start_child(held))
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            raise
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a stop that came meanwhile is raised here
            returncode = process.wait()
        except BaseException:
            process.kill()
            process.wait()
            raise
    seconds = time.perf_counter() - started
    return Outcome(returncode, seconds, "" if returncode == 0 else last_error(output))


def last_error(path: str) -> str:
    """The line of ``path`` that says why a run failed: its last ``error: ...`` line (a BaseTrainerError), else the
    last line of a traceback (``SomeError: message``), else its last line."""
    with open(path, encoding="utf-8", errors="replace") as stream:
        lines = [line.strip() for line in stream if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    if errors:
        return errors[-1][len("error:"):].strip()
    raised = [line for line in lines if _names_an_exception(line)]
    return (raised or lines or [""])[-1]


def _names_an_exception(line: str) -> bool:
    """``torch.OutOfMemoryError: CUDA out of memory...``, ``RuntimeError: ...``: a traceback's last line."""
    head = line.split(":", 1)[0]
    return ":" in line and " " not in head and head.rsplit(".", 1)[-1].endswith(("Error", "Exception", "Interrupt"))


def _start_child(signal_mask):
    """In the run's process before it starts: the study's signal mask, and death with the study (a study killed
    outright must not leave its run training on)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, signal_mask)
    die_with_parent()
