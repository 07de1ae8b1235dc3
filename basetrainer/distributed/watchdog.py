"""The watchdog: a rank whose training stops making progress ends the job instead of leaving the others waiting.

Without it, a rank that dies or stalls leaves the others inside a collective until
``dist_timeout`` (30 minutes by default). While a trainer's epochs run, a thread on every
rank watches the loop's heartbeat (each training step and each test batch) and ends the
process with exit code 124 (``WatchdogTimeout``), so that torchrun's restart or the
scheduler takes over, when

- during training and evaluation, no step (or test batch) has finished for
  ``max(watchdog_timeout, watchdog_factor x the median step time)``; the first
  ``WARMUP_STEPS`` steps (compilation, lazy set-up) and the first batch of each
  evaluation are not timed;
- in any phase (the first steps, evaluation, a checkpoint save: phases that may rightly
  take longer), nothing has finished for ``watchdog_timeout`` and a peer's own watchdog
  has been silent for half of that: the peer is dead or frozen.

Before exiting it logs which rank it blames (a silent one, else the one whose training got
least far: the others wait for it) and the stack of every thread (``faulthandler``). Ranks
tell each other their progress through the process group's store, from a thread of its
own (a store whose host died may not answer): two small writes per rank every few
seconds, and reads only once progress has stopped for a while. A rank whose epochs are
over says so there, so that a peer still finishing does not take it for dead.
"""
import contextlib
import faulthandler
import os
import statistics
import tempfile
import threading
import time

import torch.distributed as dist

from ..errors import WatchdogTimeout
from ..utils.log import get_logger

logger = get_logger()

WARMUP_STEPS = 3
_WINDOW = 64  # step times the median is taken over
_KEY = "basetrainer/watchdog"
_reporter = None


def report_to(reporter) -> None:
    """``reporter(message)`` is called before a watchdog ends this process (``launch()`` passes it on)."""
    global _reporter
    _reporter = reporter


class Watchdog:
    """One rank's watchdog; the loop calls :meth:`Watchdog.beat` after each training step and test batch."""

    def __init__(self, timeout: float, factor: float, rank: int = 0, world_size: int = 1):
        self.timeout, self.factor = float(timeout), float(factor)
        self.rank, self.world_size = rank, world_size
        self.interval = max(0.2, min(5.0, self.timeout / 10))
        self.phase_name = "training"
        self._durations = [0.0] * _WINDOW
        self._timed = 0  # training steps timed (after the warm-up)
        self._steps = 0  # training steps seen
        self._begun = 0  # training batches begun
        self._last = None  # when the last beat came; None: the next interval is not timed
        self._quiet_since = time.monotonic()
        self._done = threading.Event()

    # ------------------------------------------------------------------ what the loop calls
    def begin_batch(self) -> None:
        """A training batch begins (how far a rank got, to tell which one the others wait for)."""
        self._begun += 1

    def beat(self) -> None:
        now = time.monotonic()
        if self.phase_name == "training":
            if self._last is not None and self._steps > WARMUP_STEPS:
                self._durations[self._timed % _WINDOW] = now - self._last
                self._timed += 1
            self._steps += 1
        self._last = now

    @contextlib.contextmanager
    def phase(self, name: str):
        """While inside, the loop is in phase ``name`` ("training", "evaluation", "save")."""
        previous, self.phase_name, self._last = self.phase_name, name, None
        try:
            yield
        finally:
            self.phase_name, self._last = previous, None

    @contextlib.contextmanager
    def watching(self):
        """The scope of a run's epochs: the watching threads run while inside (none when ``timeout`` is 0)."""
        if self.timeout <= 0:
            yield
            return
        self.phase_name, self._last, self._quiet_since = "training", None, time.monotonic()
        self._done.clear()
        gossip = _Gossip(_store(self.world_size), self.rank, self.world_size)
        threads = [threading.Thread(target=target, name=f"basetrainer-watchdog-{i}", daemon=True)
                   for i, target in enumerate((lambda: self._watch(gossip), lambda: gossip.run(self)))]
        for thread in threads:
            thread.start()
        try:
            yield
        finally:
            self._done.set()
            threads[0].join()
            gossip.finish(self.progress())  # the gossip thread may be stuck on a store that does not answer

    def progress(self) -> int:
        """How far training got: training batches begun plus training steps finished."""
        return self._begun + self._steps

    # ------------------------------------------------------------------ the threads
    def limit(self):
        """The seconds a step may take now, or None while steps are not timed (warm-up, a save, start-up)."""
        if self.phase_name not in ("training", "evaluation") or not self._timed:
            return None
        return max(self.timeout, self.factor * self.median_step())

    def median_step(self) -> float:
        return statistics.median(self._durations[:min(self._timed, _WINDOW)])

    def quiet(self) -> float:
        """Seconds since the last heartbeat (the start of watching, before the first)."""
        return time.monotonic() - max(self._last or 0.0, self._quiet_since)

    def _watch(self, gossip):
        while not self._done.wait(self.interval):
            now, last, limit = time.monotonic(), self._last, self.limit()
            if last is not None:
                self._quiet_since = max(self._quiet_since, last)
            if limit is not None and last is not None and now - last > limit:
                unit = "test batch" if self.phase_name == "evaluation" else "training step"
                self._fire(gossip, f"no {unit} finished for {now - last:.0f}s (the limit is {limit:.0f}s: "
                                   f"watchdog_timeout, or watchdog_factor x the median step of "
                                   f"{self.median_step():.3g}s)")
            quiet = now - self._quiet_since
            silent = gossip.silent(now, self.timeout / 2)
            if quiet > self.timeout and silent:
                self._fire(gossip, f"nothing finished for {quiet:.0f}s ({self.phase_name}) and the watchdog of "
                                   f"rank(s) {silent} has been silent for {self.timeout / 2:.3g}s: dead or frozen")

    def _fire(self, gossip, what: str):
        if self._done.is_set():
            return
        now, patience = time.monotonic(), 2 * self.interval  # not a decision: whom the line names
        silent, asking = gossip.silent(now, patience), gossip.asking_since
        answering = gossip.answered and (asking is None or now - asking < patience)
        message = (f"rank {self.rank}: watchdog: {what}{gossip.blame(self.progress(), silent, answering)}; ending "
                   f"this process (exit code {WatchdogTimeout.exit_code}) so that a restart can take over")
        logger.error("%s; the stack of every thread follows\n%s", message, _stacks())
        for handler in logger.handlers:
            handler.flush()
        if _reporter is not None:
            _reporter(message)
        os._exit(WatchdogTimeout.exit_code)


class _Gossip:
    """What the ranks' watchdogs tell each other through the process group's store, in a thread of its
    own (a store whose host died may not answer for ``dist_timeout``): each rank's liveness (a counter
    it raises every few seconds) and progress, and, once this rank's training has been quiet for half
    ``watchdog_timeout``, what it reads of the others'."""

    def __init__(self, store, rank, world_size):
        self.store, self.rank, self.world_size = store, rank, world_size
        self.peers = {}  # rank: (liveness counter, since when it has had that value, progress)
        self.answered, self.asking_since = True, None  # the store answered the last call; when the current began
        if store is not None:
            _quietly(store.delete_key, f"{_KEY}/done/{rank}")  # an earlier run's

    def run(self, watchdog):
        while self.store is not None and not watchdog._done.wait(watchdog.interval):
            self.asking_since = time.monotonic()
            self.answered = _quietly(self.store.add, f"{_KEY}/alive/{self.rank}", 1) is not None
            self.asking_since = None
            _quietly(self.store.set, f"{_KEY}/progress/{self.rank}", str(watchdog.progress()))
            if watchdog.quiet() > watchdog.timeout / 2:
                self._poll()
            else:
                self.peers = {}

    def _poll(self):
        now, peers = time.monotonic(), dict(self.peers)
        for peer in range(self.world_size):
            if peer == self.rank or _quietly(self.store.check, [f"{_KEY}/done/{peer}"]):
                continue  # a peer whose epochs are over is not waited for
            alive, key = _quietly(self.store.add, f"{_KEY}/alive/{peer}", 0), f"{_KEY}/progress/{peer}"
            progress = _quietly(self.store.get, key) if _quietly(self.store.check, [key]) else None
            seen, since, _ = peers.get(peer, (None, now, None))
            peers[peer] = (alive, since if alive == seen else now, int(progress) if progress else None)
        self.peers = peers

    def silent(self, now, seconds) -> list:
        return [peer for peer, (_, since, _) in self.peers.items() if now - since >= seconds]

    def blame(self, own_progress, silent=(), answering=True) -> str:
        """Which rank(s) the others wait for: those whose training got least far, when the ranks differ; else
        those whose watchdog has not reached the store since this one began to look (``silent``: dead, frozen, or
        cut off from the store's machine); or that the store does not answer (``answering`` False)."""
        if not answering:  # the last call to the store failed, or the current one has waited too long
            return "; the store does not answer (rank 0, which hosts it, may be dead or cut off)"
        progress = {peer: count for peer, (_, _, count) in self.peers.items() if count is not None}
        if not progress:
            return f"; rank(s) {sorted(silent)} silent: dead, frozen, or cut off" if silent else ""
        progress[self.rank] = own_progress
        least = min(progress.values())
        if len(set(progress.values())) == 1:
            return "; every rank stopped at the same point of the loop"
        behind = sorted(peer for peer, count in progress.items() if count == least)
        who = "this rank" if behind == [self.rank] else f"rank(s) {behind}"
        return f"; {who} stalled: the others got further (training batches begun + steps done: {progress})"

    def finish(self, progress):
        """Tells the others that this rank's epochs are over, so that they do not wait for it."""
        if self.store is not None:
            _quietly(self.store.set, f"{_KEY}/done/{self.rank}", str(progress))


def _store(world_size):
    if world_size <= 1 or not dist.is_initialized():
        return None
    try:
        return dist.distributed_c10d._get_default_store()
    except (RuntimeError, ValueError):
        return None


def _quietly(call, *args):
    """``call(*args)``, or None when the store fails (its host is gone: the other rules still apply)."""
    try:
        return call(*args)
    except Exception:  # noqa: BLE001
        return None


def _stacks() -> str:
    with tempfile.TemporaryFile("w+") as dump:
        faulthandler.dump_traceback(dump, all_threads=True)
        dump.seek(0)
        return dump.read()
