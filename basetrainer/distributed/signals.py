"""Stop signals: what clusters send before pre-empting a job (SIGTERM) or at a time limit (SIGUSR1).

While a process is recording them (from ``launch()`` or a trainer's construction until its
run ends), a stop signal only sets a flag that :func:`received` reads; the trainer acts on
it at its next check. Recording scopes nest; when the last one ends, the previous handlers
come back and the flag is cleared.
"""
import contextlib
import os
import signal
import threading

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGUSR1") if hasattr(signal, name))

_received = None  # the last stop signal recorded, or None
_scopes = 0
_previous = {}


def received():
    """The stop signal recorded in this process (a ``signal.Signals``), or None."""
    return _received


def consume() -> None:
    """Forgets the recorded stop signal once a run has stopped for it, so that a run started later in this process
    (a test's, a notebook's) does not stop for it again while another recording scope (a trainer built and not yet
    collected) keeps the flag from being cleared."""
    global _received
    _received = None


def record():
    """Starts recording stop signals; returns the function that ends this scope (idempotent).

    Python lets only the main thread install handlers; elsewhere this records nothing.
    """
    global _scopes, _previous
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    if _scopes == 0:
        _previous = {signum: signal.signal(signum, _record) for signum in STOP_SIGNALS}
    _scopes += 1
    ended = []

    def end():
        global _scopes, _received
        if ended:
            return
        ended.append(True)
        _scopes -= 1
        if _scopes == 0:
            for signum, old in _previous.items():
                signal.signal(signum, old)
            _received = None

    return end


@contextlib.contextmanager
def recording():
    """Records stop signals while inside (see :func:`record`)."""
    end = record()
    try:
        yield
    finally:
        end()


def _record(signum, frame):
    global _received
    _received = signal.Signals(signum)


@contextlib.contextmanager
def handling(handler, signums=STOP_SIGNALS):
    """Calls ``handler(signum, frame)`` on a stop signal (one of ``signums``) while inside; the previous handlers
    come back after.

    Python lets only the main thread install handlers; elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, handler) for signum in signums}
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
