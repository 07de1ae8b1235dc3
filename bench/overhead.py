"""What EngineTrainer costs over a hand-written PyTorch loop.

The same model (an MLP 64-128-10) trains on the same random batches already in memory
(batch 64, 2,000 steps as 4 epochs of 500, one thread) four ways, in one process, with
rounds interleaved so that drifts in machine speed hit every variant alike:

- ``hand``: the loop a user would write: forward, loss, zero_grad, backward, step;
- ``trainer``: EngineTrainer with no callbacks and no progress bar;
- ``trainer-nochecks``: the same with ``nonfinite_loss: ignore``, which drops the NaN/inf
  loss checks (what they cost on this tiny step);
- ``trainer+callbacks``: EngineTrainer with the callbacks a user has on: progress bar,
  loss and accuracy recorders, history logging (text, CSV, TensorBoard) and a checkpoint
  at every epoch end.

It prints each variant's median seconds for the 2,000 steps and the ratio to ``hand``,
then the steady-state cost per step: the slope between runs of 400 and 2,000 steps,
which leaves out one-off costs (building the trainer, the TensorBoard writer, the
training-curves picture drawn at the end).

    python bench/overhead.py [--rounds 7] [--log-freq 50]
"""
import argparse
import contextlib
import gc
import logging
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn as nn

from basetrainer.callbacks.log_history import LogHistory
from basetrainer.callbacks.losses_recorder import LossesRecorder
from basetrainer.callbacks.model_checkpoint import ModelCheckpoint
from basetrainer.engine.trainer import EngineTrainer
from basetrainer.metric.accuracy_recorder import AccuracyRecorder

STEPS_PER_EPOCH, EPOCHS, BATCH = 500, 4, 64


def make_batches(steps_per_epoch=STEPS_PER_EPOCH):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(BATCH, 64, generator=g), torch.randint(0, 10, (BATCH,), generator=g))
            for _ in range(steps_per_epoch)]


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def hand_loop(batches, _):
    model = make_model()
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


class BenchTrainer(EngineTrainer):
    def __init__(self, cfg, batches, callbacks):
        self._batches, self._callbacks = batches, callbacks
        super().__init__(cfg)
        self.build(cfg)

    def build_train_loader(self, cfg):
        return self._batches

    def build_test_loader(self, cfg):
        return None

    def build_model(self, cfg):
        return make_model()

    def build_criterion(self, cfg):
        return nn.CrossEntropyLoss()

    def build_optimizer(self, cfg):
        return torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)

    def build_callbacks(self, cfg):
        return self._callbacks(self)


def trainer_loop(batches, args):
    cfg = {"num_epochs": EPOCHS, "gpu_id": None, "progress": False, "seed": 0}
    trainer = BenchTrainer(cfg, batches, lambda t: [])
    trainer.run()
    return trainer.model


def trainer_unchecked(batches, args):
    cfg = {"num_epochs": EPOCHS, "gpu_id": None, "progress": False, "seed": 0, "nonfinite_loss": "ignore"}
    trainer = BenchTrainer(cfg, batches, lambda t: [])
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
                       indicators=["loss", "Acc"]),
            ModelCheckpoint(model_dir=os.path.join(work_dir, "model"), indicator="Acc"),
        ]

    cfg = {"num_epochs": EPOCHS, "gpu_id": None, "progress": True, "seed": 0}
    trainer = BenchTrainer(cfg, batches, callbacks)
    with open(os.devnull, "w") as null, contextlib.redirect_stderr(null):
        trainer.run()  # the bar is drawn (to /dev/null): its cost is counted
    return trainer.model


VARIANTS = {"hand": hand_loop, "trainer": trainer_loop, "trainer-nochecks": trainer_unchecked,
            "trainer+callbacks": trainer_with_callbacks}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--log-freq", type=int, default=50, help="LogHistory's log_freq (iterations)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    logging.getLogger("basetrainer").setLevel(logging.WARNING)
    lengths = {"full": make_batches(), "short": make_batches(STEPS_PER_EPOCH // 5)}
    for fn in VARIANTS.values():  # warm-up: first-call costs (allocator, dispatcher caches, imports)
        fn(lengths["short"], args)
    times = {(name, length): [] for name in VARIANTS for length in lengths}
    names = list(VARIANTS)
    for r in range(args.rounds):
        for length, batches in lengths.items():
            for name in names[r % len(names):] + names[: r % len(names)]:  # rotate who goes first
                gc.collect()  # every run starts with the same garbage-collector state
                start = time.perf_counter()
                VARIANTS[name](batches, args)
                times[name, length].append(time.perf_counter() - start)
    med = {key: statistics.median(values) for key, values in times.items()}
    steps = {"full": STEPS_PER_EPOCH * EPOCHS, "short": STEPS_PER_EPOCH // 5 * EPOCHS}
    per_step = {name: (med[name, "full"] - med[name, "short"]) / (steps["full"] - steps["short"]) for name in names}
    print(f"MLP 64-128-10, batch {BATCH}, {steps['full']} steps ({EPOCHS} epochs), 1 thread, "
          f"{args.rounds} interleaved rounds, LogHistory log_freq {args.log_freq}, "
          f"torch {torch.__version__}, python {sys.version.split()[0]}")
    print(f"{'variant':<20}{'2000 steps s':>13}{'vs hand':>9}{'per step us':>13}{'vs hand':>9}{'min s':>8}{'max s':>8}")
    for name in names:
        full = times[name, "full"]
        print(f"{name:<20}{med[name, 'full']:>13.3f}{med[name, 'full'] / med['hand', 'full']:>9.3f}"
              f"{per_step[name] * 1e6:>13.1f}{per_step[name] / per_step['hand']:>9.3f}"
              f"{min(full):>8.3f}{max(full):>8.3f}")


if __name__ == "__main__":
    main()
