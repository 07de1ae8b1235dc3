"""Memory per process and step time: DDP against FSDP, on 1 and 2 gloo processes on the CPU.

A stack of ``--blocks`` transformer feed-forward blocks (width ``--width``, hidden 4x, about
``8 width^2`` parameters each) trains with AdamW (two
state tensors per parameter) through EngineTrainer, batch 32 per process, one thread per
process. Each rank measures, just before its optimizer step, the bytes it holds of
parameters, gradients and optimizer state (local shards under FSDP), and the median step
time over the timed steps. One process has no process group: it is the unsharded baseline
for both strategies.

    python bench/fsdp.py [--width 256] [--blocks 8] [--steps 30]
"""
import argparse
import json
import os
import statistics
import tempfile
import time

import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

from basetrainer.distributed.launch import launch
from basetrainer.engine.trainer import EngineTrainer

BATCH = 32


class FeedForward(nn.Module):
    """A transformer's feed-forward block: x + W2 gelu(W1 norm(x)), hidden width 4x."""

    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


def local_bytes(tensors) -> int:
    return sum((t.to_local() if hasattr(t, "to_local") else t).numel() * t.element_size() for t in tensors)


class BenchTrainer(EngineTrainer):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.build(cfg)
        self.step_times, self.held = [], None

    def build_train_loader(self, cfg):
        g = torch.Generator().manual_seed(0)
        samples = BATCH * cfg["steps"] * self.world_size
        data = TensorDataset(torch.randn(samples, cfg["width"], generator=g), torch.randint(0, 10, (samples,), generator=g))
        return self.build_dataloader(data, BATCH, 0, phase="train")

    def build_test_loader(self, cfg):
        return None

    def build_model(self, cfg):
        torch.manual_seed(0)
        width = cfg["width"]
        model = nn.Sequential(*[FeedForward(width) for _ in range(cfg["blocks"])], nn.Linear(width, 10))
        return self.build_model_parallel(model)

    def build_criterion(self, cfg):
        return nn.CrossEntropyLoss()

    def build_optimizer(self, cfg):
        return torch.optim.AdamW(self.model.parameters(), lr=1e-3)

    def build_callbacks(self, cfg):
        return []

    def train_step(self, inputs):
        start = time.perf_counter()
        result = super().train_step(inputs)
        self.step_times.append(time.perf_counter() - start)
        return result

    def optimizer_step(self):
        if self.held is None and self.optimizer.state:  # the second step: optimizer state exists
            params = list(self.model.parameters())
            state = [t for s in self.optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.dim()]
            self.held = {"params": local_bytes(params), "grads": local_bytes([p.grad for p in params]),
                         "optimizer": local_bytes(state)}
        super().optimizer_step()


def bench_main(cfg):
    torch.set_num_threads(1)
    trainer = BenchTrainer(cfg)
    trainer.run()
    timed = trainer.step_times[cfg["warmup"]:]
    with open(os.path.join(cfg["out"], f"rank{trainer.rank}.json"), "w") as f:
        json.dump({**trainer.held, "step_ms": 1000 * statistics.median(timed)}, f)


def run(strategy, procs, args, out):
    cfg = {"num_epochs": 1, "gpu_id": list(range(procs)), "progress": False, "seed": 0, "strategy": strategy,
           "width": args.width, "blocks": args.blocks, "steps": args.steps, "warmup": 5, "out": out}
    launch(bench_main, procs, distributed=procs > 1, args=(cfg,))
    return [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(procs)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=30, help="steps per process (5 warm up)")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    print(f"{args.blocks} feed-forward blocks of width {args.width}, AdamW, batch {BATCH} per process")
    print(f"{'per process':<22}{'params MB':>10}{'grads MB':>10}{'optim MB':>10}{'total MB':>10}{'step ms':>10}")
    for name, strategy, procs in (("1 process, unsharded", "ddp", 1), ("DDP, 2 processes", "ddp", 2),
                                  ("FSDP, 2 processes", "fsdp", 2)):
        with tempfile.TemporaryDirectory() as out:
            ranks = run(strategy, procs, args, out)
        held = ranks[0]  # every rank holds as much
        mb = [held[key] / 2**20 for key in ("params", "grads", "optimizer")]
        step = statistics.mean(rank["step_ms"] for rank in ranks)
        print(f"{name:<22}{mb[0]:>10.2f}{mb[1]:>10.2f}{mb[2]:>10.2f}{sum(mb):>10.2f}{step:>10.1f}")


if __name__ == "__main__":
    main()
