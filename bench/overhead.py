"""What EngineTrainer costs over a hand-written PyTorch loop.

The same model (an MLP 64-128-10) trains on the same random batches already in memory
(batch 64, 2,000 steps as 4 epochs of 500, one thread) four ways, in one process, with
rounds interleaved so that drifts in machine speed hit every variant alike:

- ``hand``: the loop a user would write: forward, loss, zero_grad, backward, step;
- ``hand+checks``: the same loop plus the NaN/inf loss check EngineTrainer makes by default,
  written by hand the cheapest way we know with no host sync per step: the detached losses
  are kept in a list and checked every 50 batches with one read-back. It is what that
  check costs by itself, so the trainer's ratio to it is the engine's own cost for the
  same work;
- ``trainer``: EngineTrainer with no callbacks and no progress bar;
- ``trainer-nochecks``: the same with ``nonfinite_loss: ignore``, which drops the check's
  read-back; the loss window stays, since it also feeds the epoch's loss sums;
- ``trainer+callbacks``: EngineTrainer with the callbacks a user has on: progress bar,
  loss and accuracy recorders, history logging (text, CSV, TensorBoard) and a checkpoint
  at every epoch end.

On a GPU (``--device cuda``) the batches wait on the GPU and every variant ends with a
``torch.cuda.synchronize()`` inside its timing; ``--features``, ``--width`` and ``--batch``
make the model big enough that the GPU, not the host, sets the pace.

It prints, for each variant, the median seconds of the 2,000 steps and its ratio to
``hand`` (the targets' measure) and to ``hand+checks``, then two parts of it:

- ``median step``: the median time between two batches of a run, taken from a batch list
  that stamps the clock as each batch is drawn (separate, interleaved runs). It is the
  steady cost of one step, and on a shared machine it is far steadier than whole-run
  times, because one slow step moves a median by nothing;
- ``rest``: the run's time beyond 2,000 median steps, minus the same for ``hand`` (whose
  rest is its own slow steps: collections, timer interrupts). It is the periodic work
  (NaN checks and loss sums every 50 batches, log lines, accuracy folds) plus the one-off
  work (building the trainer, the TensorBoard writer, checkpoints, the training-curves
  picture drawn at the end when matplotlib is installed; ``--no-plot`` leaves it out).

    python bench/overhead.py [--rounds 7] [--log-freq 50] [--no-plot]
    python bench/overhead.py --device cuda [--features 2048 --width 4096 --batch 2048]

``--metrics`` instead times what recording the accuracy, a confusion matrix and a mean loss costs
per step, by hand (``metric/``) and by torchmetrics (see ``bench/metric_overhead.py``).
"""
import argparse
import contextlib
import gc
import importlib.util
import logging
import math
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn as nn
from mlp_case import BATCH, EPOCHS, STEPS_PER_EPOCH, make_batches, make_model  # bench/, beside this script

from basetrainer.callbacks.log_history import LogHistory
from basetrainer.callbacks.losses_recorder import LossesRecorder
from basetrainer.callbacks.model_checkpoint import ModelCheckpoint
from basetrainer.engine.trainer import EngineTrainer
from basetrainer.metric.accuracy_recorder import AccuracyRecorder


def hand_loop(batches, args):
    model = make_model(args)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    model.train()
    for _ in range(EPOCHS):
        for x, y in batches:
            outputs = model(x)
            loss = criterion(outputs, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return model


def hand_loop_checked(batches, args, check_every=50):
    model = make_model(args)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    model.train()
    window = []
    for epoch in range(EPOCHS):
        for batch, (x, y) in enumerate(batches):
            outputs = model(x)
            loss = criterion(outputs, y)
            window.append(loss.detach())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if len(window) == check_every:
                _check_finite(window, epoch, batch)
        _check_finite(window, epoch, len(batches) - 1)
    return model


def _check_finite(window, epoch, last_batch):
    """One read-back for the whole window; a float64 sum of finite float32 losses is finite."""
    if window and not math.isfinite(torch.stack(window).double().sum().item()):
        raise FloatingPointError(f"non-finite loss at epoch {epoch}, batches up to {last_batch}")
    window.clear()


class BenchTrainer(EngineTrainer):
    def __init__(self, cfg, batches, callbacks, args):
        self._batches, self._callbacks, self._args = batches, callbacks, args
        super().__init__({**cfg, "gpu_id": [0] if args.device == "cuda" else None})
        self.build(cfg)

    def build_train_loader(self, cfg):
        return self._batches

    def build_test_loader(self, cfg):
        return None

    def build_model(self, cfg):
        return make_model(self._args)

    def build_criterion(self, cfg):
        return nn.CrossEntropyLoss()

    def build_optimizer(self, cfg):
        return torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)

    def build_callbacks(self, cfg):
        return self._callbacks(self)


def trainer_loop(batches, args):
    cfg = {"num_epochs": EPOCHS, "progress": False, "seed": 0}
    trainer = BenchTrainer(cfg, batches, lambda t: [], args)
    trainer.run()
    return trainer.model


def trainer_unchecked(batches, args):
    cfg = {"num_epochs": EPOCHS, "progress": False, "seed": 0, "nonfinite_loss": "ignore"}
    trainer = BenchTrainer(cfg, batches, lambda t: [], args)
    trainer.run()
    return trainer.model


def trainer_with_callbacks(batches, args):
    work_dir = tempfile.mkdtemp(prefix="bench-overhead-")
    logger = logging.getLogger("basetrainer.bench")

    def callbacks(trainer):
        return [
            AccuracyRecorder(indicator="Acc"),
            LossesRecorder(indicator="loss"),
            LogHistory(log_dir=os.path.join(work_dir, "log"), log_freq=args.log_freq, logger=logger,
                       indicators=["loss", "Acc"], plot=not getattr(args, "no_plot", False)),
            ModelCheckpoint(model_dir=os.path.join(work_dir, "model"), indicator="Acc"),
        ]

    cfg = {"num_epochs": EPOCHS, "progress": True, "seed": 0}
    trainer = BenchTrainer(cfg, batches, callbacks, args)
    with open(os.devnull, "w") as null, contextlib.redirect_stderr(null):
        trainer.run()  # the bar is drawn (to /dev/null): its cost is counted
    return trainer.model


VARIANTS = {"hand": hand_loop, "hand+checks": hand_loop_checked, "trainer": trainer_loop,
            "trainer-nochecks": trainer_unchecked, "trainer+callbacks": trainer_with_callbacks}


def synchronized(variant):
    """``variant`` ending when the GPU has done its work, not when the host has queued it."""
    def run(batches, args):
        model = variant(batches, args)
        torch.cuda.synchronize()
        return model
    return run


class StampedBatches(list):
    """The batches, stamping ``time.perf_counter()`` into ``stamps`` as each is drawn."""

    def __iter__(self):
        stamps, clock = self.stamps, time.perf_counter
        for batch in list.__iter__(self):
            stamps.append(clock())
            yield batch


def median_step(stamps, steps_per_epoch):
    """The median time between consecutive batches of an epoch (epoch boundaries left out)."""
    gaps = [b - a for i, (a, b) in enumerate(zip(stamps, stamps[1:])) if (i + 1) % steps_per_epoch]
    return statistics.median(gaps)


def parse_args(argv=None):
    """The command line's settings (``[]``: the defaults, as bench/instructions.py runs the variants)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--log-freq", type=int, default=50, help="LogHistory's log_freq (iterations)")
    parser.add_argument("--no-plot", action="store_true", help="LogHistory draws no training-curves picture")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--features", type=int, default=64, help="the model's inputs")
    parser.add_argument("--width", type=int, default=128, help="the model's hidden layer")
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--metrics", action="store_true",
                        help="time the accuracy's recording by hand and by torchmetrics instead (CPU)")
    return parser.parse_args(argv)


def main():
    args = parse_args()
    torch.set_num_threads(1)
    logging.getLogger("basetrainer").setLevel(logging.WARNING)
    if args.metrics:
        from metric_overhead import metric_costs  # bench/, beside this script

        return metric_costs(args)
    batches = make_batches(args)
    run = VARIANTS if args.device == "cpu" else {name: synchronized(fn) for name, fn in VARIANTS.items()}
    for fn in run.values():  # warm-up: first-call costs (allocator, dispatcher caches, imports)
        fn(batches[: STEPS_PER_EPOCH // 5], args)
    names = list(VARIANTS)
    whole, steps = {name: [] for name in names}, {name: [] for name in names}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:  # rotate who goes first
            gc.collect()  # every run starts with the same garbage-collector state
            start = time.perf_counter()
            run[name](batches, args)
            whole[name].append(time.perf_counter() - start)
            stamped = StampedBatches(batches)
            stamped.stamps = []
            gc.collect()
            run[name](stamped, args)
            steps[name].append(median_step(stamped.stamps, STEPS_PER_EPOCH))
    total = STEPS_PER_EPOCH * EPOCHS
    med = {name: statistics.median(whole[name]) for name in names}
    step = {name: statistics.median(steps[name]) for name in names}
    rest = {name: med[name] - total * step[name] for name in names}
    plot = "no picture (--no-plot)" if args.no_plot else (
        "curves picture drawn" if importlib.util.find_spec("matplotlib") else "no picture (no matplotlib)")
    where = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    print(f"MLP {args.features}-{args.width}-10 on the {where}, batch {args.batch}, {total} steps ({EPOCHS} epochs), "
          f"1 thread, {args.rounds} interleaved rounds, LogHistory log_freq {args.log_freq}, {plot}, "
          f"torch {torch.__version__}, python {sys.version.split()[0]}")
    print(f"{'variant':<20}{'2000 steps s':>13}{'vs hand':>9}{'vs checks':>10}{'median step us':>16}{'vs hand':>9}"
          f"{'vs checks':>10}{'rest ms':>9}{'min s':>8}{'max s':>8}")
    checked = "hand+checks"
    for name in names:
        print(f"{name:<20}{med[name]:>13.3f}{med[name] / med['hand']:>9.3f}{med[name] / med[checked]:>10.3f}"
              f"{step[name] * 1e6:>16.1f}{step[name] / step['hand']:>9.3f}{step[name] / step[checked]:>10.3f}"
              f"{(rest[name] - rest['hand']) * 1e3:>9.1f}{min(whole[name]):>8.3f}{max(whole[name]):>8.3f}")


if __name__ == "__main__":
    main()
