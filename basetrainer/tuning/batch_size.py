"""The batch-size finder: the largest batch per process that fits, by doubling then bisecting (Lightning's
``scale_batch_size`` in its "binsearch" mode), and the samples per second of every size tried.

Each size is tried on a loader of that batch over the trainer's own training dataset (``build_dataloader``),
with the trainer's own ``train_step``: one untimed optimizer step, then ``steps`` timed ones, forward, backward
and optimizer step each. A size fits when the steps raise no out-of-memory error and their memory (see
:mod:`.memory`) grows by at most the budget: ``max_memory``, by default on the CPU 80% of the memory available
at the start, shared by the job's processes. On the CPU a size whose memory, extrapolated linearly from the
largest size that fit, would exceed all the memory available is not tried (an over-committed machine kills a
process instead of refusing it memory). After each size, and at the end, the trainer is put back as it was.
"""
import dataclasses
import math
import time
from typing import List, Optional

import torch

from ..distributed import comm
from ..engine.lr_scaling import RULES
from ..errors import ConfigError
from .memory import MIB, PeakGrowth, available_memory, release_freed_memory
from .tool_settings import check_batch_find
from .snapshot import TrainerSnapshot
from .steps import optimizer_steps

BUDGET_SHARE = 0.8  # of the memory available at the start, when max_memory is not given (CPU)
# Optimizers that divide each step by a running estimate of the gradient's size: their lr follows the batch's
# square root (the batch-size guide, "Linear or square root").
ADAPTIVE = (torch.optim.Adam, torch.optim.AdamW, torch.optim.RMSprop, torch.optim.Adagrad, torch.optim.Adamax,
            torch.optim.NAdam, torch.optim.RAdam)
THROUGHPUT_GAIN = 1.10  # a larger size that does not raise samples/s by more than this is not worth it


@dataclasses.dataclass
class BatchTrial:
    """One size: whether it fits, its peak memory growth (MiB, the most over ranks) and samples per second (all
    ranks together), both None when it was not run to the end; ``note`` says why it does not fit."""

    batch_size: int
    fits: bool
    peak_memory_mib: Optional[float]
    samples_per_second: Optional[float]
    note: str = ""


@dataclasses.dataclass
class BatchSizeResult:
    """The sizes tried, in order; ``largest``: the largest that fits; ``knee``: the size after which samples
    per second stop growing by more than 10% (among the sizes that fit); ``budget_mib``: the memory budget
    (None: CUDA's own limit); ``limited_by_data``: ``largest`` is all the samples a process has;
    ``limited_by_trials``: the search ran out of ``max_trials`` before it settled (a larger size may fit)."""

    trials: List[BatchTrial]
    largest: int
    knee: int
    budget_mib: Optional[float]
    limited_by_data: bool
    limited_by_trials: bool = False
    lr_scaling: str = ""  # the override's lr_scaling part, when the run does not scale its lr already
    lr_note: str = ""  # what the lr becomes at the knee, and by which rule

    @property
    def override(self) -> str:
        """The recommended size as ``key=value`` overrides: the knee, the fastest size per sample that fits, and,
        unless the run scales its lr already, ``lr_scaling`` from the batch its lr was chosen for (a larger batch
        at the same lr trains the quick start to 49% against 96%)."""
        return f"batch_size={self.knee}" + (f" 'lr_scaling={self.lr_scaling}'" if self.lr_scaling else "")

    def rows(self) -> list:
        """The trials sorted by size, as dicts (the CSV's rows)."""
        return [dataclasses.asdict(trial) for trial in sorted(self.trials, key=lambda trial: trial.batch_size)]

    def summary(self) -> str:
        limit = " (all the samples a process has)" if self.limited_by_data else \
            " (max_trials sizes tried: a larger one may fit)" if self.limited_by_trials else ""
        return (f"batch-size finder: the largest batch per process that fits is {self.largest}{limit}; "
                f"samples/s grow by less than {THROUGHPUT_GAIN - 1:.0%} beyond {self.knee}: {self.override}")


def find_batch_size(trainer, first_size: int = 2, max_memory: Optional[float] = None, steps: int = 3,
                    max_trials: int = 25) -> BatchSizeResult:
    """Runs the finder on ``trainer`` (an ``EngineTrainer`` after ``build()``) and puts it back as it was;
    ``max_memory`` in MiB. Every rank of a distributed job on the CPU calls it and all take the same decisions
    (the most memory over ranks counts). A bad argument, CUDA with several processes, and a first size that does
    not fit are one-line ConfigErrors."""
    options = check_batch_find({"first_size": first_size, "max_memory": max_memory, "steps": steps,
                                "max_trials": max_trials}, "given to find_batch_size")
    device, world = trainer.device, comm.get_data_parallel_world_size()
    if device.type == "cuda" and comm.get_world_size() > 1:
        raise ConfigError("batch-find on several GPUs: an out-of-memory error on one process would leave the others "
                          "waiting in a collective; run it in one process (--gpu_id 0): the batch per process it "
                          "finds holds for each process of the job")
    dataset = trainer.train_loader.dataset
    per_process = math.ceil(len(dataset) / world)
    if options["first_size"] > per_process:
        raise ConfigError(f"first_size {options['first_size']} is more than the {per_process} training samples each "
                          f"process has: give a first_size of at most {per_process}")
    meter = PeakGrowth(device)
    budget, ceiling = _budget(device, options["max_memory"])
    trials = []
    with TrainerSnapshot(trainer) as snapshot:
        _trial(trainer, options["first_size"], 1, meter, None)  # one-off costs (thread pools, lazy kernels) first
        snapshot.restore()

        def fits(size):
            trial = _predicted_too_large(size, trials, ceiling) or _trial(trainer, size, options["steps"], meter,
                                                                           budget)
            snapshot.restore()
            trials.append(trial)
            return trial.fits

        largest = _search(fits, options["first_size"], per_process, options["max_trials"])
    if largest is None:
        raise ConfigError(f"first_size {options['first_size']} does not fit: {trials[0].note}; lower first_size, "
                          f"or raise max_memory")
    by_data = largest == per_process and all(trial.fits for trial in trials)
    settled = by_data or any(trial.batch_size == largest + 1 and not trial.fits for trial in trials)
    knee = _knee(trials)
    return BatchSizeResult(trials, largest, knee, None if budget is None else budget / MIB, by_data,
                           not settled, *_lr_at(trainer, knee))


def _lr_at(trainer, size: int) -> tuple:
    """``(lr_scaling override, note)`` for training at ``size`` per process: the lr follows the batch. Under
    ``lr_scaling`` the run's own rule does it (no override); otherwise the rule the batch-size guide gives for the
    optimizer (sqrt for Adam-type ones, which divide each step by the gradient's size; linear for SGD), from the
    global batch the config's lr was chosen for."""
    now = trainer.train_loader.batch_size
    lr = trainer.optimizer.param_groups[0].get("initial_lr", trainer.optimizer.param_groups[0]["lr"])
    if size == now:
        return "", f"the lr stays {lr:.3g} at batch {size}, the config's"
    scaling = trainer.options.lr_scaling
    rule = scaling.rule if scaling.enabled else "sqrt" if isinstance(trainer.optimizer, ADAPTIVE) else "linear"
    scaled = f"{lr:.3g} at batch {now} -> {lr * RULES[rule](size / now):.3g} at batch {size}"
    if scaling.enabled:
        return "", f"lr_scaling ({rule}) scales the lr with the batch: {scaled}"
    base = now * comm.get_data_parallel_world_size() * trainer.state.accumulate_grad_batches
    return (f"{{rule: {rule}, base_batch_size: {base}}}",
            f"the lr follows the batch by the {rule} rule for {type(trainer.optimizer).__name__}: {scaled}")


def _search(fits, first: int, cap: int, max_trials: int) -> Optional[int]:
    """The largest size that ``fits``: doubling from ``first`` (up to ``cap``) until one does not, then bisecting
    between the largest that fits and the smallest that does not; None when ``first`` does not fit."""
    low = high = None
    size, tried = first, 0
    while True:
        tried += 1
        if fits(size):
            low = size
        else:
            high = size
        if low is None:
            return None
        if (high is None and low >= cap) or (high is not None and high - low <= 1) or tried == max_trials:
            return low
        size = min(2 * low, cap) if high is None else (low + high) // 2


def _trial(trainer, size: int, steps: int, meter: PeakGrowth, budget: Optional[float]) -> BatchTrial:
    """Trains one untimed and ``steps`` timed optimizer steps on batches of ``size``."""
    source = trainer.train_loader
    loader = trainer.build_dataloader(source.dataset, size, source.num_workers, shuffle=True, phase="train",
                                      collate_fn=source.collate_fn)
    samples_per_step = size * trainer.state.accumulate_grad_batches
    out_of_memory, elapsed = False, 0.0
    with meter:
        training = optimizer_steps(trainer, loader)
        try:
            next(training)  # allocations (optimizer state, workspaces) happen here
            _synchronize(trainer.device)
            start = time.perf_counter()
            for _ in range(steps):
                next(training)
            _synchronize(trainer.device)
            elapsed = time.perf_counter() - start
        except torch.OutOfMemoryError:
            out_of_memory = True
        finally:
            training.close()
    if out_of_memory:  # outside the handler: its traceback holds the failed step's tensors
        trainer.optimizer.zero_grad(set_to_none=True)
        release_freed_memory(trainer.device, collect=True)
        return BatchTrial(size, False, None, None, "out of memory")
    growth = float(comm.all_reduce_max(torch.tensor([float(meter.growth)], dtype=torch.float64))[0])
    speed = comm.sum_over_ranks(steps * samples_per_step / elapsed)[0]
    fits = budget is None or growth <= budget
    note = "" if fits else f"its steps took {growth / MIB:.3g} MiB, over the budget of {budget / MIB:.3g} MiB"
    return BatchTrial(size, fits, growth / MIB, speed, note)


def _synchronize(device) -> None:
    """Waits for the device's queued work, so that the clock reads when the steps are done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _predicted_too_large(size: int, trials, ceiling: Optional[int]) -> Optional[BatchTrial]:
    """A trial not run, when the largest size that fit, scaled to ``size``, would take more than ``ceiling``."""
    fitted = [trial for trial in trials if trial.fits]
    if ceiling is None or not fitted:
        return None
    largest = max(fitted, key=lambda trial: trial.batch_size)
    predicted = largest.peak_memory_mib * MIB * size / largest.batch_size
    if predicted <= ceiling:
        return None
    return BatchTrial(size, False, None, None, f"not tried: about {predicted / MIB:.0f} MiB, more than the "
                                               f"{ceiling / MIB:.0f} MiB available")


def _budget(device, max_memory):
    """(the budget in bytes, or None for CUDA's own limit; the most a trial may be expected to take, or None),
    the same on every rank (rank 0's)."""
    if device.type == "cuda":
        return (None if max_memory is None else max_memory * MIB), None
    available = comm.broadcast_object(available_memory(device)) // comm.get_world_size()
    budget = max_memory * MIB if max_memory is not None else BUDGET_SHARE * available
    return budget, available


def _knee(trials) -> int:
    """The smallest size that fits from which no larger one that fits gives more than 10% more samples per
    second: the size after which throughput stops growing (bisection's close sizes do not make false knees)."""
    fitting = sorted((trial for trial in trials if trial.fits), key=lambda trial: trial.batch_size)
    for index, trial in enumerate(fitting):
        if all(larger.samples_per_second < THROUGHPUT_GAIN * trial.samples_per_second
               for larger in fitting[index + 1:]):
            return trial.batch_size
