"""The records a conversion writes: made on demand (:class:`~basetrainer.data.streaming.records.Records`), and
with ``workers`` > 1 made in worker processes and handed back in their index order
(:func:`~basetrainer.data.streaming.records.records_in_order`).

What a record costs is made in the workers: the image file read and checked by Pillow, a dataset's
``__getitem__``. litdata's serialisation of a record and the cut into shards stay in the one writing process, in
index order, so the shards and their manifest are byte for byte those of one process, whatever the number of
workers. At most a few batches a worker are in flight: the memory does not grow with the data set.
"""
import collections
import itertools
import multiprocessing
import signal
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from ...errors import DataError

BATCH = 32  # records a worker makes per task: few round trips, little held back from the writer
IN_FLIGHT = 4  # batches per worker asked for ahead of the writer


class Records:
    """A map-style view of ``make(*arguments[index])``: the records of a conversion, made only when read; with a
    ``make`` defined at a module's top level it goes to worker processes by any start method."""

    def __init__(self, make, arguments):
        self.make, self.arguments = make, arguments

    def __len__(self):
        return len(self.arguments)

    def __getitem__(self, index):
        return self.make(*self.arguments[index])


def records_in_order(dataset, workers: int):
    """An iterator over ``dataset[0], dataset[1], ...`` (a map-style dataset), made by ``workers`` processes when
    more than one: started here, before any thread a progress bar starts, and ended by its ``close()`` or at the
    end. Workers are forked where the platform can (the dataset is inherited, not pickled), else spawned; they
    ignore ^C, which the writing process answers by closing them (the batches under way finish). An error in a worker is raised here, as it was; a
    worker killed (out of memory, say) is a DataError, not a wait for records that never come."""
    if workers <= 1:
        return (dataset[index] for index in range(len(dataset)))
    return _Pooled(dataset, workers)


class _Pooled:
    def __init__(self, dataset, workers: int):
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        self.total, self.ready, self.pending = len(dataset), iter(()), collections.deque()
        self.pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker, initargs=(dataset,))
        self.starts = iter(range(0, self.total, BATCH))
        for start in itertools.islice(self.starts, IN_FLIGHT * workers):
            self._ask(start)

    def _ask(self, start: int) -> None:
        self.pending.append(self.pool.submit(_make, start, min(start + BATCH, self.total)))

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            for record in self.ready:
                return record
            if not self.pending:
                self.close()
                raise StopIteration
            try:
                batch = self.pending.popleft().result()
            except BrokenProcessPool:
                self.close()
                raise DataError("a --workers process ended abruptly (killed, out of memory?) while making records; "
                                "convert again, with fewer workers if memory is short") from None
            for start in itertools.islice(self.starts, 1):
                self._ask(start)
            self.ready = iter(batch)

    def close(self) -> None:
        if self.pool is not None:  # the batches under way finish (a few records a worker), the rest are cancelled
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool, self.pending = None, collections.deque()


_DATASET = []  # in a worker: the dataset it makes records of


def _start_worker(dataset) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _DATASET[:] = [dataset]


def _make(start: int, stop: int) -> list:
    return [_DATASET[0][index] for index in range(start, stop)]
