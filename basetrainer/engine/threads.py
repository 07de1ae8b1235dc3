"""Keeping a CPU-bound run's threads to the cores other work leaves free, while it trains.

``build()`` chose this process's threads from what the rest of the machine kept busy while it built
(:mod:`basetrainer.distributed.threads`). Another job may start, or end, later: :class:`ThreadCount` looks again
every ``every_s`` seconds of training and moves the count, with a log line, so that a run that started alone does
not collapse when a neighbour arrives (OpenMP's threads spin while they wait for one that another process
preempted), and takes the cores back when it leaves. ``OMP_NUM_THREADS`` set, ``deterministic`` (the count stays
fixed: float sums depend on it), or a ``torch.set_num_threads`` call after the build, turn it off (``build()`` then
adds none, or it stops).
"""
import math
import time

import torch

from ..distributed.threads import CoreUse, choose_threads, local_processes
from ..utils.log import get_logger
from .events import Callback

logger = get_logger()


class ThreadCount(Callback):
    """Sets torch's intra-op threads to the cores free of other work, every ``every_s`` seconds at a batch's end;
    ``threads`` is the count ``build()`` set."""

    def __init__(self, threads: int, every_s: float = 10.0):
        super().__init__()
        self.threads, self.every_s = threads, every_s
        self.core_use, self.next_look = None, math.inf

    def on_train_begin(self, logs=None):
        self.core_use, self.next_look = CoreUse(), time.monotonic() + self.every_s

    def on_batch_end(self, batch, logs=None):
        if time.monotonic() < self.next_look:
            return
        if torch.get_num_threads() != self.threads:  # someone else set them: theirs to keep
            self.next_look = math.inf
            return
        elsewhere = self.core_use.elsewhere()
        threads, why = choose_threads(elsewhere, local_processes())
        self.core_use, self.next_look = CoreUse(), time.monotonic() + self.every_s
        if threads != self.threads:
            torch.set_num_threads(threads)
            logger.info("threads per process: %d -> %d (%s)", self.threads, threads, why)
            self.threads = threads
