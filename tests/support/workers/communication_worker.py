"""Training jobs for the tests of DDP's communication (local SGD, gradient compression), several per launch.

One launch of ``--procs`` processes runs the ``--run LABEL=KIND[,kill=E:B][,resume]`` given, in
order, each in ``<root>/LABEL`` (a second run of a label resumes from the first one's
checkpoints). KIND is one of :data:`KINDS`. A small MLP whose modules are registered in
another order than the forward uses them (so DDP's first bucket layout differs from the one
it lays out after the first step) trains on Gaussian blobs for 3 epochs of 6 steps, with a
checkpoint every 3 steps and an evaluation per epoch. Every rank writes ``rank<r>.pt`` into
the run's folder: per optimizer step the all-reduce calls and bytes made from
``on_batch_begin`` to ``on_batch_end`` and whether the replicas' parameters are equal after
it; its own final parameters and optimizer state; the logs; the bytes of the parameters. The
main process logs to ``train.log`` there.
``kill=E:B`` SIGKILLs rank 0 after batch B of epoch E (its checkpoint, if any, written),
ending the launch.

    python tests/support/workers/communication_worker.py --root D --procs 2 --run a=local --run b=powersgd,kill=1:1
"""
import argparse
import os
import signal
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # tests/

from basetrainer.callbacks.losses_recorder import LossesRecorder
from basetrainer.callbacks.model_checkpoint import ModelCheckpoint
from basetrainer.distributed import comm
from basetrainer.distributed.launch import launch
from basetrainer.distributed.traffic import Traffic, count_gradient_buckets
from basetrainer.engine.events import LOWEST, Callback
from basetrainer.engine.trainer import EngineTrainer
from basetrainer.utils.log import set_logger
from support.workers.tiny import NoisyBlobs

KINDS = {
    "ddp": {},
    "local": {"local_sgd": {"period": 4, "warmup_steps": 3}},
    "powersgd": {"grad_compression": "powersgd", "powersgd": {"rank": 1, "start_step": 2}},
    "bf16": {"grad_compression": "bf16"},
}


class ShuffledMLP(nn.Module):
    """8 -> 32 -> 32 -> 4, its layers registered head first."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(32, 4)
        self.middle = nn.Linear(32, 32)
        self.stem = nn.Linear(8, 32)

    def forward(self, x):
        return self.head(torch.relu(self.middle(torch.relu(self.stem(x)))))


class StepRecorder(Callback):
    """Per optimizer step: the all-reduces since the batch began, and whether the replicas are equal."""

    def __init__(self, traffic):
        super().__init__()
        self.traffic, self.steps, self.before = traffic, [], None

    def on_batch_begin(self, batch, logs=None):
        self.before = self.traffic.totals()

    def on_batch_end(self, batch, logs=None):
        calls, sent, _ = (now - then for now, then in zip(self.traffic.totals(), self.before))
        flat = torch.cat([p.detach().reshape(-1) for p in self.trainer.model.parameters()])
        replicas = comm.all_gather(flat)
        self.steps.append({"step": self.state.global_step, "calls": calls, "bytes": sent,
                           "equal": all(torch.equal(replicas[0], other) for other in replicas[1:])})


class KillAt(Callback):
    priority = LOWEST + 1  # after ModelCheckpoint: the batch's checkpoint is written first

    def __init__(self, at):
        super().__init__()
        self.at = at

    def on_batch_end(self, batch, logs=None):
        if (self.state.epoch, batch) == self.at:
            comm.synchronize()
            if comm.is_main_process():
                os.kill(os.getpid(), signal.SIGKILL)


class CommunicatingTrainer(EngineTrainer):
    def __init__(self, cfg, traffic):
        super().__init__(cfg)
        self.traffic = traffic
        self.build(cfg)

    def build_train_loader(self, cfg):
        return self.build_dataloader(NoisyBlobs(96, 0, augment=False), 8, 0, phase="train")

    def build_test_loader(self, cfg):
        return self.build_dataloader(NoisyBlobs(101, 1, augment=False), 10, 0, phase="test", shuffle=False)

    def build_model(self, cfg):
        model = self.build_model_parallel(ShuffledMLP())
        if cfg.get("local_sgd") is None and cfg.get("grad_compression") is None:  # DDP's own all-reduce, in C++
            count_gradient_buckets(model)
        return model

    def build_criterion(self, cfg):
        return nn.CrossEntropyLoss()

    def build_optimizer(self, cfg):
        return torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)

    def build_callbacks(self, cfg):
        self.recorder = StepRecorder(self.traffic)
        return [LossesRecorder(), ModelCheckpoint(model_dir=os.path.join(cfg.work_dir, "model"), every_n_iters=3,
                                                  indicator="loss", mode="min"),
                self.recorder, KillAt(cfg.kill_at) if cfg.kill_at else None]


def train(label, kind, kill_at, resume, root):
    cfg = Config(work_dir=os.path.join(root, label), num_epochs=3, seed=7, progress=False, kill_at=kill_at,
                 resume="auto" if resume else None, **KINDS[kind])
    set_logger(level="info", logfile=os.path.join(cfg.work_dir, "train.log"))
    with Traffic() as traffic:
        trainer = CommunicatingTrainer(cfg, traffic)
        logs = trainer.run()
    own = {name: p.detach().clone() for name, p in trainer.model.module.named_parameters()}
    torch.save({"steps": trainer.recorder.steps, "parameters": own, "optimizer": trainer.optimizer.state_dict(),
                "logs": logs, "parameter_bytes": sum(p.numel() * p.element_size() for p in own.values())},
               os.path.join(cfg.work_dir, f"rank{trainer.rank}.pt"))


def main(args):
    torch.set_num_threads(1)
    for label, kind, kill_at, resume in args.runs:
        train(label, kind, kill_at, resume, args.root)


class Config(argparse.Namespace):
    def get(self, key, default=None):
        return getattr(self, key, default)


def run_spec(text):
    """``LABEL=KIND[,kill=E:B][,resume]`` -> (label, kind, kill_at, resume)."""
    label, _, spec = text.partition("=")
    kind, *options = spec.split(",")
    kill = next((tuple(int(v) for v in o[len("kill="):].split(":")) for o in options if o.startswith("kill=")), None)
    return label, kind, kill, "resume" in options


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--run", dest="runs", action="append", type=run_spec, required=True)
    arguments = parser.parse_args()
    launch(main, arguments.procs, args=(arguments,), timeout=120)
