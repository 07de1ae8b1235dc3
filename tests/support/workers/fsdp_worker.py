"""A training job for the FSDP, sharded-checkpoint and elastic-resume tests, run as a subprocess.

An MLP of repeated residual blocks (optionally with a BatchNorm) on Gaussian blobs, trained
with ``strategy`` ddp or fsdp. Rank 0 writes ``--out`` (the final weights, gathered, and the
logs); every rank writes ``rank<r>.pt`` beside it: the bytes of its local parameter and
optimizer shards, its BatchNorm statistics, and the sample indices it trained on and the lr
of each of its batches, per epoch.
``--kill-at E:B`` SIGKILLs rank 0 right after batch B of epoch E (after that batch's checkpoint
is written, and every rank has written the indices it trained on to ``seen_before_kill<r>.pt``);
``--kill-in-save N`` SIGKILLs rank 0 inside its N-th checkpoint save, after the
shards are written and before the save is published.
Several jobs separated by ``--then`` run one after the other in one launch (the first job's
``--procs``), which saves starting the processes again; a job that kills ends the launch, so it comes last.

    python tests/workers/fsdp_worker.py --work-dir D --out W.pt --procs 2 --strategy fsdp [...] [--then ...]
"""
import argparse
import os
import signal
import sys

import torch
import torch.nn as nn
from torch.utils.data import Dataset

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # tests/

from basetrainer.callbacks.ema import EMA  # noqa: E402
from basetrainer.callbacks.losses_recorder import LossesRecorder  # noqa: E402
from basetrainer.callbacks.model_checkpoint import ModelCheckpoint  # noqa: E402
from basetrainer.checkpoint import sharded as sharded_checkpoint  # noqa: E402
from basetrainer.distributed import comm  # noqa: E402
from basetrainer.distributed.launch import launch  # noqa: E402
from basetrainer.engine.events import LOWEST, Callback  # noqa: E402
from basetrainer.engine.trainer import EngineTrainer  # noqa: E402
from basetrainer.scheduler import get_scheduler  # noqa: E402
from support.workers.tiny import Cfg, NoisyBlobs  # noqa: E402


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return x + torch.relu(self.norm(self.fc(x)))


class BlockMLP(nn.Module):
    """8 -> 32, four residual blocks of 32 (92% of the parameters), optional BatchNorm, -> 4."""

    def __init__(self, batchnorm=False):
        super().__init__()
        self.stem = nn.Linear(8, 32)
        self.blocks = nn.Sequential(*[Block(32) for _ in range(4)])
        self.bn = nn.BatchNorm1d(32) if batchnorm else nn.Identity()
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.bn(self.blocks(self.stem(x))))


class Indexed(Dataset):
    """NoisyBlobs (no augmentation) that also yields each sample's index."""

    def __init__(self, n, seed):
        self.blobs = NoisyBlobs(n, seed, augment=False)

    def __len__(self):
        return len(self.blobs)

    def __getitem__(self, i):
        x, y = self.blobs[i]
        return x, y, i


class Fault(Callback):
    priority = LOWEST + 1  # after ModelCheckpoint: the batch's checkpoint is written first

    def __init__(self, kill_at):
        super().__init__()
        self.kill_at = kill_at

    def on_batch_end(self, batch, logs=None):
        trainer = self.trainer
        if self.kill_at == (trainer.epoch, batch):
            trainer.checkpoints.wait()
            torch.save(trainer.seen, os.path.join(trainer.cfg.work_dir, f"seen_before_kill{trainer.rank}.pt"))
            torch.save(trainer.lrs, os.path.join(trainer.cfg.work_dir, f"lrs_before_kill{trainer.rank}.pt"))
            comm.synchronize()
            if trainer.rank == 0:
                os.kill(os.getpid(), signal.SIGKILL)


class BlockTrainer(EngineTrainer):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.seen, self.lrs = {}, {}
        self.build(cfg)

    def build_train_loader(self, cfg):
        return self.build_dataloader(Indexed(cfg.train_size, 0), cfg.batch_size, 0, phase="train")

    def build_test_loader(self, cfg):
        # 101 samples in batches of 10: on 2 ranks, 6 batches on one and 5 on the other.
        return self.build_dataloader(Indexed(cfg.test_size, 1), 10, 0, phase="test", shuffle=False)

    def build_model(self, cfg):
        return self.build_model_parallel(BlockMLP(cfg.bn))

    def build_criterion(self, cfg):
        return nn.CrossEntropyLoss()

    def build_optimizer(self, cfg):
        return torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)

    def build_callbacks(self, cfg):
        return [LossesRecorder(), ModelCheckpoint(model_dir=os.path.join(cfg.work_dir, "model"),
                                                  every_n_iters=cfg.every_n_iters, indicator="loss", mode="min"),
                Fault(cfg.kill_at)] + ([get_scheduler("cosine", self.optimizer, 0.05, cfg.num_epochs, self.num_batches)]
                                       if cfg.cosine else []) + ([EMA(decay=0.9)] if cfg.ema else [])

    def run_step(self, inputs):
        x, y, index = inputs
        if self.model.training:
            self.seen.setdefault(self.epoch, []).extend(index.tolist())
            self.lrs.setdefault(self.epoch, []).append(self.optimizer.param_groups[0]["lr"])
        outputs = self.model(x)
        return outputs, self.criterion(outputs, y)


def local_bytes(tensors):
    return sum((t.to_local() if hasattr(t, "to_local") else t).numel() * t.element_size() for t in tensors)


def main(cfg):
    torch.set_num_threads(1)
    if cfg.kill_in_save:
        _kill_in_save(cfg.kill_in_save)
    trainer = BlockTrainer(cfg)
    logs = trainer.run()
    weights = trainer.export_weights()
    if trainer.is_main_process and cfg.out:
        torch.save({"weights": weights, "logs": logs, "test_num": trainer.test_num}, cfg.out)
    if cfg.out:
        optimizer_state = [t for s in trainer.optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
        batchnorm = [b.clone() for m in trainer.model.modules() if isinstance(m, nn.BatchNorm1d) for b in m.buffers()]
        torch.save({"param_bytes": local_bytes(list(trainer.model.parameters())),
                    "optimizer_bytes": local_bytes(optimizer_state), "batchnorm": batchnorm, "seen": trainer.seen,
                    "lrs": trainer.lrs,
                    "accumulate": trainer.state.accumulate_grad_batches},
                   os.path.join(os.path.dirname(cfg.out), f"rank{trainer.rank}.pt"))


def _kill_in_save(n):
    """SIGKILLs rank 0 in its n-th publish: the shards are written, the link not yet swapped."""
    real, calls = sharded_checkpoint.publish, []

    def publish(version, directory):
        calls.append(version)
        if len(calls) == n:
            os.kill(os.getpid(), signal.SIGKILL)
        real(version, directory)

    sharded_checkpoint.publish = publish


def parse(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--work-dir", dest="work_dir", required=True)
    p.add_argument("--out", default=None)
    p.add_argument("--strategy", default="fsdp")
    p.add_argument("--procs", type=int, default=1)
    p.add_argument("--epochs", dest="num_epochs", type=int, default=2)
    p.add_argument("--train-size", dest="train_size", type=int, default=96)
    p.add_argument("--test-size", dest="test_size", type=int, default=101)
    p.add_argument("--batch-size", dest="batch_size", type=int, default=8)
    p.add_argument("--accumulate", dest="accumulate_grad_batches", type=int, default=1)
    p.add_argument("--clip", dest="clip_grad_norm", type=float, default=0.0)
    p.add_argument("--bn", action="store_true", help="a BatchNorm before the head")
    p.add_argument("--ema", action="store_true", help="an EMA of the weights (exported, and evaluated with)")
    p.add_argument("--cosine", action="store_true", help="a cosine lr schedule over the epochs (lr per batch recorded)")
    p.add_argument("--async", dest="async_checkpoint", action="store_true")
    p.add_argument("--every-n-iters", dest="every_n_iters", type=int, default=0)
    p.add_argument("--resume", default=None)
    p.add_argument("--activation-checkpointing", dest="activation_checkpointing", nargs="*", default=[])
    p.add_argument("--compile", action="store_true")
    p.add_argument("--amp", default="none", help="none, bf16 or fp16")
    p.add_argument("--kill-at", dest="kill_at", type=lambda s: tuple(int(v) for v in s.split(":")), default=None)
    p.add_argument("--kill-in-save", dest="kill_in_save", type=int, default=0)
    cfg = p.parse_args(argv, namespace=Cfg())
    cfg.progress, cfg.seed = False, 7
    return cfg


def run_jobs(cfgs):
    for cfg in cfgs:
        main(cfg)


def split_jobs(argv):
    """The command line's jobs: its arguments split at each ``--then``."""
    jobs = [[]]
    for arg in argv:
        if arg == "--then":
            jobs.append([])
        else:
            jobs[-1].append(arg)
    return jobs


if __name__ == "__main__":
    cfgs = [parse(job) for job in split_jobs(sys.argv[1:])]
    launch(run_jobs, cfgs[0].procs, args=(cfgs,), timeout=120)
