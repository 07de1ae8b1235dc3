"""Training jobs on device meshes for the hybrid-parallel tests, several in one launch of 4 gloo processes.

A residual MLP whose blocks are a colwise and a rowwise Linear (the model carries its tensor-parallel
plan) trains with SGD, accumulation 2 and clipping at 0.5 for a few steps on each layout named on
the command line, one after the other in the same processes (a layout is ``name=R,S,T``: dp_replicate,
dp_shard and tp; ``name=R,S,T@STEPS`` is cut off after that many optimizer steps, every process raising
right after the step's checkpoint, as a killed job ends; ``name=R,S,T!STEPS`` sends SIGTERM to the launcher
after that many steps, as a cluster does before it pre-empts a job (the job saves and exits 75: run it
alone); ``name=R,S,T<other`` resumes from ``other``'s
last checkpoint; ``+ema`` adds an EMA of the weights, decay 0.9, which the weights written are then;
``P:R,S,T~SCHEDULE/MICROBATCHES`` is a pipeline of P stages (``+plain``: of a model whose forward calls every
module; ``+run_step``: by a trainer overriding run_step, whose refusal is written to ``<name>.error``); ``+lr`` halves the
learning rate after optimizer step 3 and turns on ``deterministic`` and the watchdog). For each,
rank 0 writes ``<out>/<name>.pt``: the full weights, the logs,
and every rank's data-parallel rank and the sample indices it trained on. ``<out>/reference<D>.pt``
are the weights a hand-written one-process loop reaches on the union of ``D`` processes' batches, and
``<out>/reference_ema<D>.pt`` their EMA. The test set (37 samples, batches of 5: shards of unequal length)
is evaluated at the end (``logs["test"]["loss"]``) and predicted (``trainer.predict``).

    python tests/support/workers/mesh_worker.py --out DIR --procs 4 tp4=1,1,4 fsdp_tp=1,2,2 ...
"""
import argparse
import copy
import multiprocessing
import os
import signal
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # tests/

from basetrainer.callbacks.ema import EMA  # noqa: E402
from basetrainer.callbacks.losses_recorder import LossesRecorder  # noqa: E402
from basetrainer.callbacks.model_checkpoint import ModelCheckpoint  # noqa: E402
from basetrainer.data.samplers import StreamSampler  # noqa: E402
from basetrainer.distributed import comm  # noqa: E402
from basetrainer.distributed.launch import launch  # noqa: E402
from basetrainer.engine.events import LOWEST, Callback  # noqa: E402
from basetrainer.engine.trainer import EngineTrainer  # noqa: E402
from basetrainer.scheduler import schedules  # noqa: E402
from basetrainer.scheduler.build_scheduler import LRSchedulerCallback  # noqa: E402
from basetrainer.errors import ConfigError  # noqa: E402
from support.workers.fsdp_worker import Indexed  # noqa: E402
from support.workers.tiny import Cfg  # noqa: E402

STEPS, BATCH, ACCUMULATE, CLIP, LR, SEED, TRAIN_SIZE, EMA_DECAY, LR_DROP = 6, 4, 2, 0.5, 0.2, 7, 64, 0.9, 3


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(self.norm(x))))


class TensorParallelMLP(nn.Module):
    """8 -> 16, four blocks (16 -> 64 -> 16, split colwise then rowwise under tensor parallel), -> 4."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(8, 16)
        self.blocks = nn.ModuleList(Block(16) for _ in range(4))
        self.head = nn.Linear(16, 4)

    def tensor_parallel_plan(self, tp_size):
        return {"blocks.*.up": "colwise", "blocks.*.down": "rowwise"}

    def forward(self, x):
        x = self.stem(x) if self.stem is not None else x  # under a pipeline, later stages hold no stem
        for block in self.blocks:
            x = block(x)
        return self.head(x) if self.head is not None else x


class MeshTrainer(EngineTrainer):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.seen = []
        self.build(cfg)

    def build_train_loader(self, cfg):
        return self.build_dataloader(Indexed(TRAIN_SIZE, 0), BATCH, 0, phase="train", stream=True)

    def build_test_loader(self, cfg):
        return self.build_dataloader(Indexed(37, 1), 5, 0, phase="test", shuffle=False)

    def build_model(self, cfg):
        return self.build_model_parallel(TensorParallelMLP())

    def build_criterion(self, cfg):
        return nn.CrossEntropyLoss()

    def build_optimizer(self, cfg):
        return torch.optim.SGD(self.model.parameters(), lr=LR)

    def build_callbacks(self, cfg):
        return [LossesRecorder(), ModelCheckpoint(model_dir=os.path.join(cfg.work_dir, "model"), indicator="loss", mode="min",
                                every_n_iters=1 if cfg.cut_at else 0), CutOff(cfg.cut_at or cfg.signal_at,
                                                                              bool(cfg.signal_at))] + (
                    [EMA(decay=EMA_DECAY)] if cfg.ema else []) + (
                    [LRSchedulerCallback(self.optimizer, schedules.multi_step([LR_DROP], 0.5), per_optimizer_step=True)]
                    if cfg.lr_drop else [])

    def run_step(self, inputs):
        x, y, index = inputs
        if self.model.training:
            self.seen.append(index.tolist())
        outputs = self.model(x)
        return outputs, self.criterion(outputs, y)


class Pairs(torch.utils.data.Dataset):
    """``Indexed``'s samples without their index: the ``(inputs, targets)`` a pipeline takes."""

    def __init__(self, size, offset):
        self.samples = Indexed(size, offset)

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        return self.samples[index][:2]


class PipelineTrainer(MeshTrainer):
    """The same training, through a pipeline: batches of ``(inputs, targets)`` and the default ``run_step``."""

    run_step = EngineTrainer.run_step

    def build_train_loader(self, cfg):
        return self.build_dataloader(Pairs(TRAIN_SIZE, 0), BATCH, 0, phase="train", stream=True)

    def build_test_loader(self, cfg):
        return self.build_dataloader(Pairs(37, 1), 5, 0, phase="test", shuffle=False)

    def build_model(self, cfg):
        return self.build_model_parallel(PlainMLP() if cfg.plain else TensorParallelMLP())


class RunStepTrainer(PipelineTrainer):
    def run_step(self, inputs):
        return super().run_step(inputs)


class PlainMLP(TensorParallelMLP):
    """Its forward calls every module, as a model written for one process does."""

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class CutOff(Callback):
    """After optimizer step ``at`` (0: never): raises :class:`Cut` once the step's checkpoint is written, or with
    ``signal`` sends SIGTERM from rank 0 to the launcher."""

    priority = LOWEST + 1  # after ModelCheckpoint

    def __init__(self, at, signal_launcher=False):
        super().__init__()
        self.at, self.signal_launcher = at, signal_launcher

    def on_batch_end(self, batch, logs=None):
        trainer = self.trainer
        if not self.at or trainer.state.global_step != self.at or trainer.state.accumulating:
            return
        if not self.signal_launcher:
            raise Cut()
        if trainer.is_main_process:
            os.kill(multiprocessing.parent_process().pid, signal.SIGTERM)  # the launcher


class Cut(Exception):
    pass


def reference(data_parallel: int, steps: int, lr_drop: bool = False) -> tuple:
    """The weights one process reaches, by hand, on the union of ``data_parallel`` processes' batches, and their
    EMA (with the EMA callback's warm-up: decay min(0.9, (1 + n) / (10 + n)) at its n-th update); ``lr_drop``:
    the learning rate halved from optimizer step ``LR_DROP`` on."""
    torch.manual_seed(SEED)
    model = TensorParallelMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    data = Indexed(TRAIN_SIZE, 0)
    stream = iter(StreamSampler(data, num_replicas=1, rank=0, seed=SEED))
    union = BATCH * data_parallel
    average = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for step in range(steps):
        for micro in range(ACCUMULATE):
            x, y, _ = zip(*(data[next(stream)] for _ in range(union)))
            loss = nn.functional.cross_entropy(model(torch.stack(x)), torch.stack(y)) / ACCUMULATE
            loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.param_groups[0]["lr"] = LR * (0.5 if lr_drop and step >= LR_DROP else 1)
        optimizer.step()
        optimizer.zero_grad()
        decay = min(EMA_DECAY, (2 + step) / (11 + step))
        with torch.no_grad():
            for key, value in model.state_dict().items():
                average[key].lerp_(value, 1 - decay)
    return copy.deepcopy(model.state_dict()), average


def parse_job(text):
    name, _, spec = text.partition("=")
    spec, *flags = spec.split("+")
    spec, _, resume = spec.partition("<")
    spec, _, signal_at = spec.partition("!")
    spec, _, steps = spec.partition("@")
    spec, _, schedule = spec.partition("~")
    pp, _, spec = spec.rpartition(":")
    sizes = dict(zip(("dp_replicate", "dp_shard", "tp"), (int(size) for size in spec.split(","))), pp=int(pp or 1))
    schedule, _, microbatches = schedule.partition("/")
    pipeline = {"schedule": schedule, "microbatches": int(microbatches or 2)} if schedule else {}
    return name, sizes, pipeline, int(steps or 0), int(signal_at or 0), resume or None, set(flags)


def main(args):
    torch.set_num_threads(1)
    for job in args.jobs:
        name, sizes, pipeline, cut_at, signal_at, resume, flags = parse_job(job)
        cfg = Cfg(work_dir=os.path.join(args.out, name), max_iters=STEPS, num_epochs=None, seed=SEED,
                  ema="ema" in flags, plain="plain" in flags, lr_drop="lr" in flags,
                  deterministic="lr" in flags, watchdog_timeout=60 if "lr" in flags else 0,
                  cut_at=cut_at, signal_at=signal_at, stop_check_every=1, accumulate_grad_batches=ACCUMULATE,
                  clip_grad_norm=CLIP, progress=False, parallel={"mesh": sizes, "pipeline": pipeline or None},
                  resume=os.path.join(args.out, resume, "model", "last") if resume else None)
        if "run_step" in flags:  # a pipeline with run_step overridden: refused on every process, the message kept
            try:
                RunStepTrainer(cfg)
            except ConfigError as error:
                if comm.is_main_process():
                    with open(os.path.join(args.out, f"{name}.error"), "w") as file:
                        file.write(str(error))
            continue
        trainer = (PipelineTrainer if pipeline else MeshTrainer)(cfg)
        try:
            logs = trainer.run()
        except Cut:
            comm.synchronize()
            continue
        weights = trainer.export_weights()
        seen = comm.all_gather((comm.get_data_parallel_rank(), trainer.seen))
        predicted = trainer.predict(trainer.test_loader)
        if trainer.is_main_process:
            torch.save({"weights": weights, "logs": logs, "seen": seen, "strategy": trainer.strategy.name,
                        "predicted": predicted}, os.path.join(args.out, f"{name}.pt"))
        comm.synchronize()
    if comm.is_main_process():
        for data_parallel in (1, 2, 4):
            weights, average = reference(data_parallel, STEPS)
            torch.save(weights, os.path.join(args.out, f"reference{data_parallel}.pt"))
            torch.save(average, os.path.join(args.out, f"reference_ema{data_parallel}.pt"))
        torch.save(reference(2, STEPS, lr_drop=True)[0], os.path.join(args.out, "reference_lr2.pt"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("jobs", nargs="+")
    arguments = parser.parse_args()
    launch(main, arguments.procs, args=(arguments,), timeout=120)
