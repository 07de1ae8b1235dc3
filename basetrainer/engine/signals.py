"""Stop signals: what clusters send before pre-empting a job (SIGTERM) or at a time limit (SIGUSR1)."""
import contextlib
import os
import signal
import threading

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGUSR1") if hasattr(signal, name))


@contextlib.contextmanager
def handling(handler):
    """Calls ``handler(signum, frame)`` on a stop signal while inside; the previous handlers come back after.

    Python lets only the main thread install handlers; elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def forwarding_to(processes):
    """While inside, stop signals sent to this process are passed on to the live ``processes``."""

    def forward(signum, frame):
        for process in processes:
            if process.is_alive():
                os.kill(process.pid, signum)

    return handling(forward)
