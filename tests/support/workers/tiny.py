"""A small, complete training job that tests run as a subprocess.

It covers what a real job does (sharded loader with random augmentation, dropout, SGD
with momentum, an LR schedule, loss recorder, checkpoints) in a few seconds on a CPU.
Faults are injected from the command line: ``--kill-at E:B`` SIGKILLs the process after
batch B of epoch E, ``--raise-on-rank R`` makes rank R raise, ``--hang-on-rank R[:S[:T]]`` makes
rank R stop responding after step S (2) for T seconds (for good), ``--signal-at E:B:NAME`` sends signal NAME to the
launcher (as a cluster does before pre-empting a job), ``--die-once-at E:B`` SIGKILLs rank
1 the first time only (for torchrun restarts). In any phase: ``--signal-in PHASE:N:NAME`` sends NAME to the launcher
and ``--kill-in PHASE:N[:S][@R]`` SIGKILLs rank R (0) at the N-th event of PHASE on that
rank: ``training`` (a batch's end), ``evaluation`` (a test batch), ``save`` (inside the
N-th write of the training state: half-way through the bytes, or with S >= 1 just before
its S-th rename), ``start-up`` (N=1: building the loaders; N=2: loading the checkpoint).
``--probe-dir D`` makes every rank write, to D, the first random numbers it drew, every file
it opened for writing under the work dir (seen through a Python audit hook) and how many
events of each phase it saw. ``--shards LOCATION`` trains on shards of the same kind of samples
(``support.shards.Numbered``: the noise is the shards' augmentation, seeded per sample) with
``--workers N`` loader workers, and ``--record D`` makes every rank append to D the sample indices
of each batch it trains (``rank<R>.jsonl``: epoch, batch, indices, and the job's number of processes); ``--stop-process-at E:B:PID``
stops the process PID (a server the shards come from) after batch B of epoch E.

    python tests/workers/tiny.py --work-dir D --out W.pt [--procs 2] [--resume auto] ...
"""
import argparse
import collections
import io
import json
import multiprocessing
import os
import signal
import sys
import time

import torch
import torch.nn as nn
from torch.utils.data import Dataset

from basetrainer.callbacks.losses_recorder import LossesRecorder
from basetrainer.callbacks.model_checkpoint import ModelCheckpoint
from basetrainer.checkpoint import files as ckpt
from basetrainer.checkpoint import model_state_dict
from basetrainer.distributed import signals
from basetrainer.distributed.launch import launch
from basetrainer.engine.events import Callback
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


class Noise:
    """The shards' augmentation: fresh noise on the features (from the sample's own seeded stream)."""

    def __call__(self, sample):
        x, y, index = sample
        return x + 0.1 * torch.randn(8), y, index


class Phases:
    """Counts this rank's events per phase and sends the signal or the SIGKILL asked for at the N-th."""

    def __init__(self, cfg, rank, world_size):
        self.cfg, self.rank, self.world_size = cfg, rank, world_size
        self.seen = collections.Counter()

    def arrive(self, phase, stage=0):
        """Called at each event of ``phase`` (``stage``: which step of a save this is, 0: its bytes)."""
        if stage == 0:
            self.seen[phase] += 1
        count, signal_in, kill_in = self.seen[phase], self.cfg.signal_in, self.cfg.kill_in
        if signal_in and signal_in[:2] == (phase, count) and self.rank == 0 and stage == 0:
            send_to_launcher(signal_in[2], self.world_size)
        if kill_in and kill_in == (phase, count, stage, self.rank):
            os.kill(os.getpid(), signal.SIGKILL)


def send_to_launcher(name, world_size):
    # Under launch the launcher is the process that started the workers; in one process it is this process.
    launched = world_size > 1 and "TORCHELASTIC_RUN_ID" not in os.environ
    launcher = multiprocessing.parent_process().pid if launched else os.getpid()
    os.kill(launcher, getattr(signal, name))
    deadline = time.monotonic() + 30  # as a scheduler's signal, it is here before the next step: the launcher
    while signals.received() is None and time.monotonic() < deadline:  # forwards it to this worker
        time.sleep(0.01)


class Fault(Callback):
    def __init__(self, cfg, phases):
        super().__init__()
        self.cfg, self.phases = cfg, phases

    def on_batch_end(self, batch, logs):
        trainer, cfg, here = self.trainer, self.cfg, (self.trainer.epoch, batch)
        if cfg.raise_on_rank is not None and trainer.rank == cfg.raise_on_rank and trainer.iteration == 2:
            raise ValueError(f"injected failure on rank {trainer.rank}")
        if cfg.hang_on_rank is not None and cfg.hang_on_rank[:2] == (trainer.rank, trainer.iteration):
            time.sleep(cfg.hang_on_rank[2])
        if cfg.kill_at == here:
            os.kill(os.getpid(), signal.SIGKILL)
        if cfg.stop_process_at and cfg.stop_process_at[:2] == here and trainer.rank == 0:
            os.kill(cfg.stop_process_at[2], signal.SIGTERM)  # a server the job reads from goes away
        if cfg.signal_at and cfg.signal_at[:2] == here and trainer.rank == 0:
            send_to_launcher(cfg.signal_at[2], trainer.world_size)
        if cfg.die_once_at == here and trainer.rank == trainer.world_size - 1:
            marker = os.path.join(cfg.work_dir, "died_once")
            if not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
        self.phases.arrive("training")

    def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
        self.phases.arrive("evaluation")


class TinyTrainer(EngineTrainer):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.phases = Phases(cfg, self.rank, self.world_size)
        self.build(cfg)

    def build_train_loader(self, cfg):
        self.phases.arrive("start-up")
        if cfg.shards:
            from basetrainer.data.streaming import open_shards

            data = open_shards(cfg.shards, transform=None if cfg.plain else Noise(), cache=cfg.shard_cache,
                               retry_seconds=cfg.retry_seconds, shuffle_window=1)
            return self.build_dataloader(data, cfg.batch_size, cfg.workers, phase="train")
        return self.build_dataloader(NoisyBlobs(cfg.train_size, 0, augment=not cfg.plain), cfg.batch_size, 0,
                                     phase="train")

    def run_step(self, inputs):
        if len(inputs) == 3:  # shards: (x, y, index); the indices recorded when asked
            inputs, indices = inputs[:2], inputs[2]
            if self.cfg.record and self.model.training:
                with open(os.path.join(self.cfg.record, f"rank{self.rank}.jsonl"), "a") as f:
                    f.write(json.dumps({"epoch": self.state.epoch, "batch": self.state.batch,
                                        "indices": indices.tolist(), "processes": self.world_size}) + "\n")
        return super().run_step(inputs)

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
            ModelCheckpoint(model_dir=os.path.join(cfg.work_dir, "model"), epochs=cfg.num_epochs,
                            indicator="loss", inverse=True, every_n_iters=cfg.every_n_iters),
            Fault(cfg, self.phases),
        ]


def main(cfg):
    torch.set_num_threads(1)
    writes = _audit_writes(cfg.work_dir) if cfg.probe_dir else None
    trainer = TinyTrainer(cfg)
    _watch_saves_and_loads(trainer.phases)
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
    if trainer.is_main_process:
        time.sleep(cfg.linger)  # still working (say, drawing curves) while the other ranks exit
    if cfg.probe_dir:
        with open(os.path.join(cfg.probe_dir, f"rank{trainer.rank}.json"), "w") as f:
            json.dump({"writes": sorted(set(writes)), "first_random": first_random, "phases": trainer.phases.seen}, f)


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


def _watch_saves_and_loads(phases):
    """Makes the training state's writes and the checkpoint's load events of the phases "save" and "start-up"."""
    real_save, real_replace, real_load = ckpt.save_checkpoint, os.replace, ckpt.load_checkpoint
    saving = []

    def save_checkpoint(obj, path, keep_previous=False):
        if not keep_previous:
            return real_save(obj, path)
        saving.append(0)
        try:
            return real_save(obj, path, keep_previous)
        finally:
            saving.pop()

    def torch_save(obj, stream, *args, **kwargs):
        if not saving:
            return real_torch_save(obj, stream, *args, **kwargs)
        whole = io.BytesIO()
        real_torch_save(obj, whole, *args, **kwargs)
        data = whole.getvalue()
        stream.write(data[: len(data) // 2])
        phases.arrive("save")  # half the bytes written
        stream.write(data[len(data) // 2:])

    def replace(source, target):
        if saving:
            saving[-1] += 1
            phases.arrive("save", stage=saving[-1])
        return real_replace(source, target)

    def load_checkpoint(path, *args, **kwargs):
        phases.seen["start-up"] = 1
        phases.arrive("start-up")
        return real_load(path, *args, **kwargs)

    real_torch_save = ckpt.torch.save
    ckpt.save_checkpoint, ckpt.torch.save, os.replace, ckpt.load_checkpoint = (save_checkpoint, torch_save, replace,
                                                                              load_checkpoint)


def _hang_point(text):
    """``R[:S[:SECONDS]]`` -> (rank, step (2), seconds (3600: for good))."""
    rank, step, seconds = (text.split(":") + ["2", "3600"][text.count(":"):])[:3]
    return int(rank), int(step), float(seconds)


def _kill_point(text):
    """``PHASE:N[:S][@R]`` -> (phase, n, stage, rank)."""
    point, _, rank = text.partition("@")
    phase, n, *stage = point.split(":")
    return phase, int(n), int(stage[0]) if stage else 0, int(rank or 0)


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
    p.add_argument("--hang-on-rank", dest="hang_on_rank", default=None, type=_hang_point)
    p.add_argument("--signal-at", dest="signal_at", default=None,
                   type=lambda s: (int(s.split(":")[0]), int(s.split(":")[1]), s.split(":")[2]))
    p.add_argument("--die-once-at", dest="die_once_at", type=lambda s: tuple(int(v) for v in s.split(":")),
                   default=None)
    p.add_argument("--signal-in", dest="signal_in", default=None,
                   type=lambda s: (s.split(":")[0], int(s.split(":")[1]), s.split(":")[2]))
    p.add_argument("--kill-in", dest="kill_in", default=None, type=_kill_point)
    p.add_argument("--eval-every", dest="eval_every_n_iters", type=int, default=0)
    p.add_argument("--stop-check-every", dest="stop_check_every", type=int, default=None)
    p.add_argument("--watchdog", dest="watchdog_timeout", type=float, default=None, help="watchdog_timeout (s)")
    p.add_argument("--deterministic", action="store_true")
    p.add_argument("--no-requeue", dest="slurm_requeue", action="store_false")
    p.add_argument("--linger", type=float, default=0.0, help="seconds rank 0 works on after training")
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--probe-dir", dest="probe_dir", default=None)
    p.add_argument("--plain", action="store_true", help="no dropout, no augmentation, constant lr")
    p.add_argument("--accumulate", type=int, default=1, help="accumulate_grad_batches")
    p.add_argument("--shards", default=None, help="train on these shards (support.shards.numbered_shards)")
    p.add_argument("--shard-cache", dest="shard_cache", default=None, help="the cache of remote shards")
    p.add_argument("--retry-seconds", dest="retry_seconds", type=float, default=60.0)
    p.add_argument("--workers", type=int, default=0, help="training loader workers (with --shards)")
    p.add_argument("--record", default=None, help="a folder: each rank appends the indices it trains on")
    p.add_argument("--stop-process-at", dest="stop_process_at", default=None,
                   type=lambda s: tuple(int(v) for v in s.split(":")), help="E:B:PID: SIGTERM to PID after batch B")
    p.add_argument("--gpu", action="store_true", help="train on GPUs 0..procs-1 (NCCL) instead of the CPU")
    cfg = p.parse_args(argv, namespace=Cfg())
    cfg.gpu_id = list(range(cfg.procs)) if cfg.gpu else None
    cfg.progress, cfg.seed = False, 7
    cfg.accumulate_grad_batches = cfg.accumulate
    cfg.watchdog_factor = 2.0 if cfg.watchdog_timeout else None
    return cfg


if __name__ == "__main__":
    cfg = parse()
    launch(main, cfg.procs, num_machines=cfg.machines, machine_rank=cfg.machine_rank, dist_url=cfg.dist_url,
           args=(cfg,), timeout=cfg.timeout)
