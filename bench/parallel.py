"""Hybrid parallelism on a device mesh: memory per process and step time, the engine against a hand-written loop;
and a pipeline's activation memory under 1F1B against GPipe.

A stack of ``--blocks`` transformer feed-forward blocks (width ``--width``, hidden 4x) and a
linear head trains with AdamW on 4 gloo processes, batch 32 per data-parallel process, one
thread per process, on each layout of ``parallel.mesh`` (pp x dp_replicate x dp_shard x tp):
a pipeline splits the blocks into stages (the head with the last), run by a schedule over
microbatches; tensor parallel splits each block's two Linears (colwise, rowwise); FSDP shards
over dp_shard; HSDP keeps dp_replicate sharded copies. Every layout runs twice in the same
processes, alternately, ``--rounds`` times: through EngineTrainer (``parallel.mesh`` and the
model's plan) and as a hand-written loop with the same parallelism (``parallelize_module``,
``fully_shard``, ``PipelineStage`` and the schedule, ``optimizer.step()``).

Each rank measures, before its second optimizer step, the bytes it holds of parameters,
gradients and optimizer state (local shards), and the median step time over the timed steps.
*ideal* is the whole model's bytes (parameters, gradients, AdamW's two states) divided by the
shards (pp x dp_shard x tp): what a process would hold if every tensor were split.

*Activations* are the most bytes autograd holds for backward at once during a step (every
tensor a forward saves, counted from the save until backward frees it, through
``saved_tensors_hooks``; the largest rank): what a schedule's order costs, whatever the device.

    python bench/parallel.py [--width 256] [--blocks 8] [--steps 25] [--rounds 2] [--only PP]
"""
import argparse
import json
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import get_schedule_class
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.utils.data import TensorDataset

from basetrainer.distributed import comm
from basetrainer.distributed.launch import launch
from fsdp import BATCH, FeedForward, local_bytes  # bench/fsdp.py, beside this file
from fsdp import BenchTrainer as FSDPBenchTrainer

WARMUP, PROCESSES, MICROBATCHES = 5, 4, 8
DIMENSIONS = ("pp", "dp_replicate", "dp_shard", "tp")
LAYOUTS = (("TP 4", (1, 1, 1, 4), None), ("FSDP 2 x TP 2", (1, 1, 2, 2), None), ("HSDP 2x1 x TP 2", (1, 2, 1, 2), None),
           ("FSDP 4", (1, 1, 4, 1), None), ("HSDP 2x2", (1, 2, 2, 1), None), ("PP 2 x FSDP 2", (2, 1, 2, 1), "1F1B"),
           ("PP 4, GPipe", (4, 1, 1, 1), "GPipe"), ("PP 4, 1F1B", (4, 1, 1, 1), "1F1B"))


class Stack(nn.Module):
    """The blocks, then the head; under a pipeline a later stage holds no head until the last (None)."""

    def __init__(self, width, blocks):
        super().__init__()
        self.blocks = nn.ModuleList(FeedForward(width) for _ in range(blocks))
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x) if self.head is not None else x

    def tensor_parallel_plan(self, tp_size):
        return {"blocks.*.up": "colwise", "blocks.*.down": "rowwise"}


def make_model(width, blocks):
    torch.manual_seed(0)
    return Stack(width, blocks)


class SavedActivations:
    """A context that counts the bytes autograd saves for backward, from each save until backward frees it, and
    keeps the most held at once (``peak``)."""

    def __init__(self):
        self.held = self.peak = 0

    def __enter__(self):
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda saved: saved.tensor)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)

    def _pack(self, tensor):
        return _Saved(tensor, self)


class _Saved:
    def __init__(self, tensor, counter):
        self.tensor, self.counter = tensor, counter
        self.size = tensor.numel() * tensor.element_size()
        counter.held += self.size
        counter.peak = max(counter.peak, counter.held)

    def __del__(self):
        self.counter.held -= self.size


def held_bytes(model, optimizer) -> dict:
    params = list(model.parameters())
    state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.dim()]
    return {"params": local_bytes(params), "grads": local_bytes([p.grad for p in params]),
            "optimizer": local_bytes(state)}


class BenchTrainer(FSDPBenchTrainer):
    """bench/fsdp.py's trainer (it measures the bytes held and each step's time) on this stack, its data shared out
    over the data-parallel processes."""

    def build_train_loader(self, cfg):
        g = torch.Generator().manual_seed(0)
        samples = BATCH * cfg["steps"] * comm.get_data_parallel_world_size()
        data = TensorDataset(torch.randn(samples, cfg["width"], generator=g), torch.randint(0, 10, (samples,), generator=g))
        return self.build_dataloader(data, BATCH, 0, phase="train")

    def build_model(self, cfg):
        return self.build_model_parallel(make_model(cfg["width"], cfg["blocks"]))


def engine(cfg, layout, schedule) -> dict:
    parallel = {"mesh": dict(zip(DIMENSIONS, layout))}
    if schedule:
        parallel["pipeline"] = {"schedule": schedule, "microbatches": MICROBATCHES}
    trainer = BenchTrainer({**cfg, "parallel": parallel})
    with SavedActivations() as activations:
        trainer.run()
    return {**trainer.held, "step_ms": 1000 * statistics.median(trainer.step_times[WARMUP:]),
            "activations": activations.peak}


def hand_written(cfg, layout, schedule) -> dict:
    """The same parallelism by hand: this process's pipeline stage (the blocks divided evenly, the head last), tensor
    parallel, then FSDP units and root over the data dimensions; a schedule of torch.distributed.pipelining."""
    pp, replicate, shard, tp = layout
    mesh = init_device_mesh("cpu", layout, mesh_dim_names=DIMENSIONS)
    model = make_model(cfg["width"], cfg["blocks"])
    stage = dist.get_rank() // (replicate * shard * tp)
    if pp > 1:
        per_stage = cfg["blocks"] // pp
        for index in range(cfg["blocks"]):
            if index // per_stage != stage:
                model.blocks[index] = nn.Identity()
        if stage != pp - 1:
            model.head = None
    if tp > 1:
        plan = {f"blocks.{i}.{name}": style for i in range(cfg["blocks"]) if not isinstance(model.blocks[i], nn.Identity)
                for name, style in (("up", ColwiseParallel()), ("down", RowwiseParallel()))}
        parallelize_module(model, mesh["tp"], plan)
    if replicate * shard > 1:
        for block in model.blocks:
            if not isinstance(block, nn.Identity):
                fully_shard(block, mesh=mesh["dp_replicate", "dp_shard"], reshard_after_forward=pp == 1)
        fully_shard(model, mesh=mesh["dp_replicate", "dp_shard"], reshard_after_forward=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(dist.get_rank() % (replicate * shard * tp) // tp)
    x, y = torch.randn(BATCH, cfg["width"], generator=g), torch.randint(0, 10, (BATCH,), generator=g)
    if pp > 1:
        pipeline = PipelineStage(model, stage, pp, torch.device("cpu"), group=mesh["pp"].get_group())
        schedule = get_schedule_class(schedule)(pipeline, MICROBATCHES, loss_fn=nn.functional.cross_entropy)
    times, held = [], None
    with SavedActivations() as activations:
        for step in range(cfg["steps"]):
            start = time.perf_counter()
            if pp == 1:
                nn.functional.cross_entropy(model(x), y).backward()
            else:
                schedule.step(*((x,) if stage == 0 else ()), target=y if stage == pp - 1 else None)
            if step == 1:
                held = held_bytes(model, optimizer)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - start)
    return {**held, "step_ms": 1000 * statistics.median(times[WARMUP:]), "activations": activations.peak}


def bench_main(cfg):
    torch.set_num_threads(1)
    results = {}
    for _ in range(cfg["rounds"]):
        for name, layout, schedule in LAYOUTS:
            if not name.startswith(cfg["only"]):
                continue
            for kind, measure in (("engine", engine), ("hand", hand_written)):
                results.setdefault(f"{name}|{kind}", []).append(measure(cfg, layout, schedule))
    with open(os.path.join(cfg["out"], f"rank{comm.get_rank()}.json"), "w") as f:
        json.dump(results, f)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=25, help="steps per measurement (5 warm up)")
    parser.add_argument("--rounds", type=int, default=2, help="measurements of each layout and loop, alternating")
    parser.add_argument("--only", default="", help="the layouts whose name starts with this (default: all)")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as out:
        cfg = {"num_epochs": 1, "gpu_id": list(range(PROCESSES)), "progress": False, "seed": 0, "width": args.width,
               "blocks": args.blocks, "steps": args.steps, "rounds": args.rounds, "out": out, "only": args.only}
        launch(bench_main, PROCESSES, args=(cfg,))
        ranks = [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(PROCESSES)]
    total = sum(p.numel() for p in make_model(args.width, args.blocks).parameters()) * 4 * 4  # fp32: p, g, 2 states
    print(f"{args.blocks} feed-forward blocks of width {args.width} and a head, AdamW, batch {BATCH} per data-parallel "
          f"process ({MICROBATCHES} microbatches under a pipeline), {PROCESSES} gloo processes; whole model "
          f"{total / 2**20:.2f} MB (parameters, gradients, AdamW)")
    print(f"{'layout':<18}{'params MB':>10}{'grads MB':>10}{'optim MB':>10}{'total MB':>10}{'ideal MB':>10}"
          f"{'vs ideal':>10}{'engine ms':>11}{'hand ms':>9}{'ratio':>7}{'activ. MB':>11}{'hand act.':>11}")
    for name, (pp, replicate, shard, tp), _ in LAYOUTS:
        if not name.startswith(args.only):
            continue
        runs = {kind: [measure for rank in ranks for measure in rank[f"{name}|{kind}"]] for kind in ("engine", "hand")}
        held = {key: max(run[key] for run in runs["engine"]) / 2**20 for key in ("params", "grads", "optimizer")}
        mine = sum(held.values())
        ideal = total / 2**20 / (pp * shard * tp)
        step = {kind: statistics.median(run["step_ms"] for run in runs[kind]) for kind in runs}
        activations = {kind: max(run["activations"] for run in runs[kind]) / 2**20 for kind in runs}
        print(f"{name:<18}{held['params']:>10.2f}{held['grads']:>10.2f}{held['optimizer']:>10.2f}{mine:>10.2f}"
              f"{ideal:>10.2f}{mine / ideal:>10.3f}{step['engine']:>11.1f}{step['hand']:>9.1f}"
              f"{step['engine'] / step['hand']:>7.3f}{activations['engine']:>11.2f}{activations['hand']:>11.2f}")


if __name__ == "__main__":
    main()
