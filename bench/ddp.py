"""Training throughput of 1 process vs 2 gloo processes on the CPU: EngineTrainer against a hand-written loop.

A small CNN (2 conv layers, 3x32x32 inputs, 10 classes) trains on random images held in
memory, batch 32 per process, one thread per process. Four variants run in the same
invocation, each for a warm-up epoch and a timed epoch:

- ``hand, 1 proc``: a plain PyTorch loop;
- ``trainer, 1 proc``: EngineTrainer (no callbacks, no progress bar);
- ``hand DDP, 2 procs``: torch.multiprocessing + DistributedDataParallel + DistributedSampler, by hand;
- ``trainer, 2 procs``: the same EngineTrainer started with basetrainer's ``launch``.

It prints samples/s for each, EngineTrainer's throughput relative to the hand-written
loop with the same number of processes, and the 2-process/1-process scaling.

Then the data-loading case: the digits example's pipeline (ImageFolder PNGs, resize,
crop, normalise, ResNet-18 at 32x32) on 2 processes with ``num_workers`` 0 and 2, timing
the second epoch: loader workers must make an epoch no slower (they used to start as
fresh interpreters that re-imported the script every epoch).

    python bench/ddp.py [--samples 4096] [--rounds 3] [--digits-rounds 2]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from basetrainer.distributed import comm
from basetrainer.distributed.launch import launch
from basetrainer.distributed.process_group import free_port
from basetrainer.engine.events import Callback
from basetrainer.engine.trainer import EngineTrainer
from basetrainer.tasks.classification import ClassificationTrainer, parse_config, prepare_data

BATCH = 32


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )


def make_dataset(samples):
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(samples, 3, 32, 32, generator=g), torch.randint(0, 10, (samples,), generator=g))


def report(path, seconds, samples):
    with open(path, "w") as f:
        json.dump({"seconds": seconds, "samples": samples}, f)


# ---------------------------------------------------------------- hand-written
def hand_worker(local_rank, world_size, url, samples, out):
    torch.set_num_threads(1)
    if world_size > 1:
        dist.init_process_group("gloo", init_method=url, world_size=world_size, rank=local_rank)
    dataset = make_dataset(samples)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0) if world_size > 1 else None
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=sampler is None, sampler=sampler, drop_last=True)
    model = make_model()
    if world_size > 1:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(2):  # epoch 0 warms up, epoch 1 is timed
        if sampler is not None:
            sampler.set_epoch(epoch)
        if epoch == 1:
            if world_size > 1:
                dist.barrier()
            start = time.perf_counter()
        seen = 0
        for x, y in loader:
            loss = criterion(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            seen += len(y)
    if world_size > 1:
        dist.barrier()
    if local_rank == 0:
        report(out, time.perf_counter() - start, seen * world_size)
    if world_size > 1:
        dist.destroy_process_group()


def run_hand(procs, samples, out):
    if procs == 1:
        hand_worker(0, 1, None, samples, out)
    else:
        torch.multiprocessing.spawn(hand_worker, args=(procs, f"tcp://127.0.0.1:{free_port()}", samples, out),
                                    nprocs=procs)


# ---------------------------------------------------------------- EngineTrainer
class Timer(Callback):
    """Times the second epoch, after all ranks reach it."""

    def __init__(self, out):
        super().__init__()
        self.out, self.samples = out, 0

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == 1:
            comm.synchronize()
            self.start = time.perf_counter()

    def on_train_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
        if epoch == 1:
            self.samples += len(inputs[1])

    def on_train_end(self, logs=None):
        comm.synchronize()
        if comm.is_main_process():
            report(self.out, time.perf_counter() - self.start, self.samples * comm.get_world_size())


class CNNTrainer(EngineTrainer):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.build(cfg)

    def build_train_loader(self, cfg):
        return self.build_dataloader(make_dataset(cfg["samples"]), BATCH, 0, phase="train")

    def build_test_loader(self, cfg):
        return None

    def build_model(self, cfg):
        return self.build_model_parallel(make_model())

    def build_criterion(self, cfg):
        return nn.CrossEntropyLoss()

    def build_optimizer(self, cfg):
        return torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)

    def build_callbacks(self, cfg):
        return [Timer(cfg["out"])]


def trainer_main(cfg):
    torch.set_num_threads(1)
    CNNTrainer(cfg).run()


def run_trainer(procs, samples, out):
    cfg = {"num_epochs": 2, "gpu_id": list(range(procs)), "progress": False, "seed": 0, "samples": samples,
           "out": out}
    launch(trainer_main, procs, distributed=procs > 1, args=(cfg,))


# ---------------------------------------------------------------- data-loading workers on the digits
class DigitsTrainer(ClassificationTrainer):
    def build_callbacks(self, cfg):
        return [Timer(cfg.out)]


def digits_main(cfg):
    torch.set_num_threads(1)
    DigitsTrainer(cfg).run()


def run_digits(num_workers, work_dir, out):
    cfg = parse_config(["--distributed", "--gpu_id", "0", "1", "--num_epochs", "2", "--num_workers", str(num_workers),
                        f"work_dir={work_dir}", "progress=false"])
    cfg.out = out
    prepare_data(cfg)
    launch(digits_main, 2, args=(cfg,))


VARIANTS = [("hand, 1 proc", run_hand, 1), ("trainer, 1 proc", run_trainer, 1),
            ("hand DDP, 2 procs", run_hand, 2), ("trainer, 2 procs", run_trainer, 2)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=4096, help="training samples per epoch (all ranks)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--digits-rounds", type=int, default=2, help="rounds of the data-loading case")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.rounds:
        processes_and_loops(args.rounds, args.samples)
    if args.digits_rounds:
        digits_workers(args.digits_rounds)


def processes_and_loops(rounds, samples):
    throughput = {name: [] for name, _, _ in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        for r in range(rounds):
            order = VARIANTS[r % len(VARIANTS):] + VARIANTS[: r % len(VARIANTS)]
            for name, run, procs in order:
                run(procs, samples, out)
                with open(out) as f:
                    result = json.load(f)
                throughput[name].append(result["samples"] / result["seconds"])
    med = {name: statistics.median(values) for name, values in throughput.items()}
    print(f"small CNN 3x32x32, batch {BATCH}/process, {samples} samples/epoch, 1 thread/process, "
          f"{rounds} rounds, {os.cpu_count()} CPUs, torch {torch.__version__}, python {sys.version.split()[0]}")
    print(f"{'variant':<22}{'samples/s':>11}{'min':>9}{'max':>9}")
    for name, _, _ in VARIANTS:
        print(f"{name:<22}{med[name]:>11.0f}{min(throughput[name]):>9.0f}{max(throughput[name]):>9.0f}")
    print(f"trainer / hand, 1 proc:  {med['trainer, 1 proc'] / med['hand, 1 proc']:.3f}")
    print(f"trainer / hand, 2 procs: {med['trainer, 2 procs'] / med['hand DDP, 2 procs']:.3f}")
    print(f"2 procs / 1 proc: hand {med['hand DDP, 2 procs'] / med['hand, 1 proc']:.2f}x, "
          f"trainer {med['trainer, 2 procs'] / med['trainer, 1 proc']:.2f}x")


def digits_workers(rounds):
    seconds = {0: [], 2: []}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        for r in range(rounds):
            for workers in ((0, 2) if r % 2 == 0 else (2, 0)):
                run_digits(workers, os.path.join(tmp, f"w{workers}"), out)
                with open(out) as f:
                    seconds[workers].append(json.load(f)["seconds"])
    print(f"digits example, 2 processes, second epoch, {rounds} rounds (median, min-max):")
    for workers, values in seconds.items():
        print(f"  num_workers {workers}: {statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})")
    print(f"  2 workers / 0 workers: {statistics.median(seconds[2]) / statistics.median(seconds[0]):.2f}")


if __name__ == "__main__":
    main()
