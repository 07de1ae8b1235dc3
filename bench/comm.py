"""What DDP's replicas send, and what it costs: local SGD, post-local SGD and gradient compression against plain DDP.

The digits example's pipeline (examples/example.py: ImageFolder PNGs, ResNet-18 at 32x32,
12 epochs, batch 64 per process, SGD with a cosine schedule) on 2 gloo processes, every
variant in the same invocation, one round per seed (the order rotated from round to round):

- ``ddp``: plain DDP, every gradient all-reduced in fp32 at every step;
- ``local SGD /4``, ``local SGD /16``: ``local_sgd.period`` 4 and 16, from the first step;
- ``post-local SGD``: ``local_sgd: {period: 16, warmup_steps: 36}`` (three epochs of DDP first);
- ``bf16``: ``grad_compression: bf16``;
- ``PowerSGD r1``, ``PowerSGD r4``: ``grad_compression: powersgd``, rank 1 and 4, from step 10.

How bytes are counted: a :class:`~basetrainer.distributed.traffic.Traffic` in every process wraps
``torch.distributed.all_reduce`` (through which DDP's communication hooks, the model averaging and
basetrainer's own collectives go) and DDP's buffer broadcast; plain DDP gets torch's
``allreduce_hook`` (documented as equivalent to its built-in C++ all-reduce) so that its buckets
pass there too. A byte is one element of the tensor a process hands to ``all_reduce`` times its
size. Per optimizer step: what rank 0 all-reduced between ``on_batch_begin`` and ``on_batch_end``
(the step itself, averaging included), over every step of the run, and over the second half's
epochs only ("2nd half": PowerSGD's and post-local SGD's steady state); "whole run" adds the
evaluations, checkpoints, exports and stop checks, still divided by the steps. Step time: the
mean wall time of those windows from the second epoch on, on rank 0, the median over the
rounds. Accuracy: the last evaluation's top-1 on the 359 validation images (of the replicas'
average, under local SGD), per seed and their mean.
Also: the run's wall time (rank 0, from building the callbacks to the end) and the size of the
last ``last.pth`` (under local SGD it holds every replica's parameters and optimizer state).

    python bench/comm.py [--variants ddp bf16 ...] [--seeds 2020 2021 2022] [--epochs 12] [--json results.json]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch

from basetrainer.distributed import comm
from basetrainer.distributed.launch import launch
from basetrainer.distributed.traffic import Traffic, count_gradient_buckets
from basetrainer.engine.events import HIGHEST, LOWEST, Callback, Event
from basetrainer.tasks.classification import ClassificationTrainer, parse_config, prepare_data

VARIANTS = {
    "ddp": [],
    "local SGD /4": ["local_sgd.period=4"],
    "local SGD /16": ["local_sgd.period=16"],
    "post-local SGD": ["local_sgd.period=16", "local_sgd.warmup_steps=36"],
    "bf16": ["grad_compression=bf16"],
    "PowerSGD r1": ["grad_compression=powersgd", "powersgd.rank=1"],
    "PowerSGD r4": ["grad_compression=powersgd", "powersgd.rank=4"],
}


class Measure(Callback):
    """Times each training batch and counts what it all-reduced; rank 0 writes the totals at the end."""

    priorities = {Event.BATCH_BEGIN: LOWEST, Event.BATCH_END: HIGHEST}  # the window holds the step only

    def __init__(self, traffic, out):
        super().__init__()
        self.traffic, self.out, self.steps = traffic, out, []
        self.started = time.perf_counter()

    def on_batch_begin(self, batch, logs=None):
        self.before, self.clock = self.traffic.totals(), time.perf_counter()

    def on_batch_end(self, batch, logs=None):
        seconds = time.perf_counter() - self.clock
        calls, sent, broadcast = (now - then for now, then in zip(self.traffic.totals(), self.before))
        self.steps.append({"epoch": self.state.epoch, "seconds": seconds, "calls": calls, "bytes": sent,
                           "broadcast": broadcast})

    def on_train_end(self, logs=None):
        if not comm.is_main_process():
            return
        model = self.trainer.model.module
        with open(self.out, "w") as stream:
            json.dump({"steps": self.steps, "totals": self.traffic.totals(), "accuracy": logs["test"]["Acc"],
                       "wall": time.perf_counter() - self.started,
                       "checkpoint": os.path.getsize(self.trainer.checkpoints.path),
                       "parameter_bytes": sum(p.numel() * p.element_size() for p in model.parameters())}, stream)


class MeasuredTrainer(ClassificationTrainer):
    def __init__(self, cfg, traffic):
        self.traffic = traffic
        super().__init__(cfg)

    def build_model(self, cfg, **kwargs):
        model = super().build_model(cfg, **kwargs)
        if not self.options.communication.enabled:  # DDP's built-in all-reduce: through torch's allreduce_hook
            count_gradient_buckets(model)
        return model

    def build_callbacks(self, cfg, **kwargs):
        return [*super().build_callbacks(cfg, **kwargs), Measure(self.traffic, cfg.out)]


def worker(cfg):
    torch.set_num_threads(1)
    with Traffic() as traffic:
        MeasuredTrainer(cfg, traffic).run()


def run_variant(overrides, work_dir, out, seed, epochs):
    cfg = parse_config(["--distributed", "--no-progress", f"work_dir={work_dir}", "--gpu_id", "0", "1", "--opts",
                        f"seed={seed}", f"num_epochs={epochs}", *overrides])
    cfg.out = out
    prepare_data(cfg)
    launch(worker, 2, args=(cfg,))
    with open(out) as stream:
        return json.load(stream)


def summarize(result) -> dict:
    steps = result["steps"]
    timed = [step["seconds"] for step in steps if step["epoch"] >= 1]
    second_half = [step["bytes"] for step in steps if step["epoch"] >= max(s["epoch"] for s in steps) // 2 + 1]
    return {"bytes per step": sum(step["bytes"] for step in steps) / len(steps),
            "second half bytes per step": sum(second_half) / len(second_half),
            "calls per step": sum(step["calls"] for step in steps) / len(steps),
            "whole run bytes per step": result["totals"][1] / len(steps),
            "broadcast per step": sum(step["broadcast"] for step in steps) / len(steps),
            "step seconds": statistics.mean(timed), "accuracy": result["accuracy"], "wall": result["wall"],
            "checkpoint bytes": result["checkpoint"], "steps": len(steps), "parameter bytes": result["parameter_bytes"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS), metavar="NAME")
    parser.add_argument("--seeds", nargs="+", type=int, default=[2020, 2021, 2022],
                        help="one round of every variant per seed, the order rotated from round to round")
    parser.add_argument("--epochs", type=int, default=12, help="the example's 12, or fewer for a quick look")
    parser.add_argument("--json", default=None, help="also write every run's figures to this file")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    runs = {name: [] for name in args.variants}
    with tempfile.TemporaryDirectory() as tmp:
        for round_index, seed in enumerate(args.seeds):
            shift = round_index % len(args.variants)
            for name in args.variants[shift:] + args.variants[:shift]:
                work_dir = os.path.join(tmp, f"{seed}-{args.variants.index(name)}")
                runs[name].append(summarize(run_variant(VARIANTS[name], work_dir, work_dir + ".json", seed,
                                                        args.epochs)))
    if args.json:
        with open(args.json, "w") as stream:
            json.dump({"seeds": args.seeds, "runs": runs}, stream, indent=1)
    report(runs, args.seeds)


def report(runs, seeds):
    """One row per variant: the bytes (the same in every round), the median step time over the rounds,
    the accuracy per seed and its mean, each against DDP's."""
    first = next(iter(runs.values()))[0]
    print(f"digits example, ResNet-18 at 32x32 ({first['parameter bytes'] / 1e6:.1f} MB of parameters), 2 gloo "
          f"processes, {first['steps']} optimizer steps, seeds {' '.join(map(str, seeds))}, {os.cpu_count()} CPUs, "
          f"torch {torch.__version__}, python {sys.version.split()[0]}")
    print(f"{'variant':<16}{'MB/step':>9}{'x fewer':>9}{'2nd half':>9}{'calls/step':>11}{'run MB/step':>12}"
          f"{'bcast KB/step':>14}{'step s':>8}{'vs ddp':>8}{'acc % (mean)':>14}{'Δ acc':>7}  {'acc % per seed':<22}"
          f"{'wall s':>7}{'last.pth MB':>12}")
    base = {key: _typical(runs["ddp"], key) for key in ("bytes per step", "step seconds", "accuracy")} \
        if "ddp" in runs else None
    for name, figures in runs.items():
        f = {key: _typical(figures, key) for key in figures[0]}
        fewer = f"{base['bytes per step'] / f['bytes per step']:.1f}" if base and f["bytes per step"] else "-"
        slower = f"{f['step seconds'] / base['step seconds']:.2f}" if base else "-"
        delta = f"{f['accuracy'] - base['accuracy']:+.2f}" if base else "-"
        per_seed = " ".join(f"{run['accuracy']:.2f}" for run in figures)
        print(f"{name:<16}{f['bytes per step'] / 1e6:>9.2f}{fewer:>9}{f['second half bytes per step'] / 1e6:>9.2f}"
              f"{f['calls per step']:>11.2f}{f['whole run bytes per step'] / 1e6:>12.2f}"
              f"{f['broadcast per step'] / 1e3:>14.1f}{f['step seconds']:>8.3f}{slower:>8}{f['accuracy']:>14.2f}"
              f"{delta:>7}  {per_seed:<22}{f['wall']:>7.1f}{f['checkpoint bytes'] / 1e6:>12.0f}")


def _typical(figures, key):
    """The mean accuracy over seeds; the median of the times; the bytes (equal in every round)."""
    values = [run[key] for run in figures]
    return statistics.mean(values) if key == "accuracy" else statistics.median(values)


if __name__ == "__main__":
    main()
