"""A small, complete training job that tests run as a subprocess.

It covers what a real job does (sharded loader with random augmentation, dropout, SGD
with momentum, an LR schedule, loss recorder, checkpoints) in a few seconds on a CPU.
Faults are injected from the command line: ``--kill-at E:B`` SIGKILLs the process after
batch B of epoch E, ``--raise-on-rank R`` makes rank R raise, ``--hang-on-rank R`` makes
rank R stop responding, ``--signal-at E:B:NAME`` sends signal NAME to the launcher (as a
cluster does before pre-empting a job), ``--die-once-at E:B`` SIGKILLs rank 1 the first
time only (for torchrun restarts), ``--fail-save`` makes the next checkpoint write fail
half-way. ``--probe-dir D`` makes every rank write, to D,
the first random numbers it drew and every file it opened for writing under the work dir
(seen through a Python audit hook).

    python tests/workers/tiny.py --work-dir D --out W.pt [--procs 2] [--resume auto] ...
"""
import argparse
import json
import os
import signal
import sys
import time

import torch
import torch.nn as nn
from torch.utils.data import Dataset

from basetrainer.callbacks.callbacks import Callback
from basetrainer.callbacks.losses_recorder import LossesRecorder
from basetrainer.callbacks.model_checkpoint import ModelCheckpoint
from basetrainer.engine.checkpoint import model_state_dict
from basetrainer.engine.launch import launch
from basetrainer.engine.trainer import EngineTrainer
from basetrainer.scheduler.build_scheduler import get_scheduler


class NoisyBlobs(Dataset):
    """4 Gaussian blobs; training samples get fresh noise from the global RNG (like augmentation)."""

    def __init__(self, n, seed, augment):
        g = torch.Generator().manual_seed(seed)
        self.y = torch.randint(0, 4, (n,), generator=g)
        centers = torch.tensor([[2.0, 0], [-2.0, 0], [0, 2.0], [0, -2.0]])
        self.x = torch.cat([centers[self.y], torch.randn(n, 6, generator=g)], dim=1) + 0.5 * torch.randn(n, 8, generator=g)
        self.augment = augment

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        x = self.x[i]
        if self.augment:
            x = x + 0.1 * torch.randn(8)
        return x, self.y[i]


class Fault(Callback):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg

    def on_batch_end(self, batch, logs):
        trainer, cfg, here = self.trainer, self.cfg, (self.trainer.epoch, batch)
        if cfg.raise_on_rank is not None and trainer.rank == cfg.raise_on_rank and trainer.iteration == 2:
            raise ValueError(f"injected failure on rank {trainer.rank}")
        if cfg.hang_on_rank is not None and trainer.rank == cfg.hang_on_rank and trainer.iteration == 2:
            time.sleep(3600)
        if cfg.kill_at == here:
            os.kill(os.getpid(), signal.SIGKILL)
        if cfg.signal_at and cfg.signal_at[:2] == here and trainer.rank == 0:
            # Under launch's spawn the launcher is the parent; in one process it is this process.
            launcher = os.getppid() if trainer.world_size > 1 and "TORCHELASTIC_RUN_ID" not in os.environ else os.getpid()
            os.kill(launcher, getattr(signal, cfg.signal_at[2]))
        if cfg.die_once_at == here and trainer.rank == trainer.world_size - 1:
            marker = os.path.join(cfg.work_dir, "died_once")
            if not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)


class TinyTrainer(EngineTrainer):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.build(cfg)

    def build_train_loader(self, cfg):
        return self.build_dataloader(NoisyBlobs(cfg.train_size, 0, augment=not cfg.plain), cfg.batch_size, 0,
                                     phase="train")

    def build_test_loader(self, cfg):
        # 101 samples in batches of 10: on 2 ranks, 6 batches on one and 5 on the other.
        return self.build_dataloader(NoisyBlobs(101, 1, augment=False), 10, 0, phase="test", shuffle=False)

    def build_model(self, cfg):
        model = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.0 if cfg.plain else 0.2),
                              nn.Linear(32, 4))
        return self.build_model_parallel(model)

    def build_criterion(self, cfg):
        return nn.CrossEntropyLoss()

    def build_optimizer(self, cfg):
        return torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)

    def build_callbacks(self, cfg):
        return [
            get_scheduler("constant" if cfg.plain else "cosine", self.optimizer, lr_init=0.05,
                          num_epochs=cfg.num_epochs, num_steps=self.num_steps, milestones=[],
                          num_warn_up=0 if cfg.plain else 1),
            LossesRecorder(),
            ModelCheckpoint(moder_dir=os.path.join(cfg.work_dir, "model"), epochs=cfg.num_epochs,
                            indicator="loss", inverse=True, every_n_iters=cfg.every_n_iters),
            Fault(cfg),
        ]


def main(cfg):
    torch.set_num_threads(1)
    writes = _audit_writes(cfg.work_dir) if cfg.probe_dir else None
    trainer = TinyTrainer(cfg)
    if cfg.fail_save:
        _fail_next_save()
    first_random = None
    if cfg.probe_dir:
        class Probe(Callback):
            def on_train_begin(self, logs):
                nonlocal first_random
                state = torch.get_rng_state()
                first_random = torch.rand(2).tolist()
                torch.set_rng_state(state)
        trainer.callbacks.append(Probe())
    logs = trainer.run()
    if trainer.is_main_process and cfg.out:
        torch.save({"weights": model_state_dict(trainer.model), "logs": logs, "test_num": trainer.test_num}, cfg.out)
    if cfg.probe_dir:
        with open(os.path.join(cfg.probe_dir, f"rank{trainer.rank}.json"), "w") as f:
            json.dump({"writes": sorted(set(writes)), "first_random": first_random}, f)


def _audit_writes(root):
    """Records the paths under ``root`` that this process opens for writing."""
    root = os.path.abspath(root)
    seen = []

    def hook(event, args):
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.path.abspath(os.fsdecode(args[0]))
            mode, flags = (args[1] or ""), (args[2] or 0)
            writing = any(c in mode for c in "wax+") or flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
            if writing and path.startswith(root):
                seen.append(path)

    sys.addaudithook(hook)
    return seen


def _fail_next_save():
    """Makes torch.save write part of the file, then fail, as a full disk would."""
    import basetrainer.engine.checkpoint as ckpt

    real_save = ckpt.torch.save

    def failing_save(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 partial")
        raise OSError(28, "No space left on device")

    ckpt.torch.save = failing_save
    ckpt._real_save = real_save


class Cfg(argparse.Namespace):
    def get(self, key, default=None):
        return getattr(self, key, default)


def parse(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--work-dir", dest="work_dir", required=True)
    p.add_argument("--out", default=None)
    p.add_argument("--procs", type=int, default=1)
    p.add_argument("--machines", type=int, default=1)
    p.add_argument("--machine-rank", dest="machine_rank", type=int, default=0)
    p.add_argument("--dist-url", dest="dist_url", default="auto")
    p.add_argument("--epochs", dest="num_epochs", type=int, default=3)
    p.add_argument("--train-size", dest="train_size", type=int, default=96)
    p.add_argument("--batch-size", dest="batch_size", type=int, default=8)
    p.add_argument("--resume", default=None)
    p.add_argument("--every-n-iters", dest="every_n_iters", type=int, default=0)
    p.add_argument("--kill-at", dest="kill_at", type=lambda s: tuple(int(v) for v in s.split(":")), default=None)
    p.add_argument("--raise-on-rank", dest="raise_on_rank", type=int, default=None)
    p.add_argument("--hang-on-rank", dest="hang_on_rank", type=int, default=None)
    p.add_argument("--signal-at", dest="signal_at", default=None,
                   type=lambda s: (int(s.split(":")[0]), int(s.split(":")[1]), s.split(":")[2]))
    p.add_argument("--die-once-at", dest="die_once_at", type=lambda s: tuple(int(v) for v in s.split(":")),
                   default=None)
    p.add_argument("--fail-save", dest="fail_save", action="store_true")
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--probe-dir", dest="probe_dir", default=None)
    p.add_argument("--plain", action="store_true", help="no dropout, no augmentation, constant lr")
    p.add_argument("--accumulate", type=int, default=1, help="accumulate_grad_batches")
    p.add_argument("--gpu", action="store_true", help="train on GPUs 0..procs-1 (NCCL) instead of the CPU")
    cfg = p.parse_args(argv, namespace=Cfg())
    cfg.gpu_id = list(range(cfg.procs)) if cfg.gpu else None
    cfg.progress, cfg.seed = False, 7
    cfg.accumulate_grad_batches = cfg.accumulate
    return cfg


if __name__ == "__main__":
    cfg = parse()
    launch(main, cfg.procs, num_machines=cfg.machines, machine_rank=cfg.machine_rank, dist_url=cfg.dist_url,
           args=(cfg,), timeout=cfg.timeout)
