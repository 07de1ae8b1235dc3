"""A job of replica groups for the fault-tolerance tests: the toy classifier (with BatchNorm) on samples that carry their
index.

    python tests/support/workers/replica_group_worker.py OUT_DIR '{"fault_tolerance": {...}, ...}' [FAULTS]

The second argument is merged into the toy config (``work_dir`` is OUT_DIR/work; ``step_seconds``: a pause after
each batch, ``step_seconds_alone`` after a batch trained while a group is missing, so that a killed group is back
before the others end, however long its restart takes; ``processes``: per group, under DDP; ``tag``:
written on every line; ``attempt``: this start's number, for a group started by hand with
``fault_tolerance.group_id``, whose number the files then carry). FAULTS is a JSON list of
``{"group": g, "attempt": k, "at": "step"|"allreduce"|"sync", "step": n}``: that group, on its k-th start (0: the
first), kills itself with SIGKILL after the n-th optimizer step it takes (``step``), or in the steps after that just
before its gradients are averaged over the groups (``allreduce``) or it sends DiLoCo's sync (``sync``).

A fault may name a ``rank`` (default 0) of a group of several processes. Without ``fault_tolerance`` the job is
plain DDP (its attempt: torchrun's restart count), for the benchmark's comparison.

Each group appends one JSON line per batch to OUT_DIR/group<g>.jsonl (its other processes to
group<g>_rank<r>.jsonl): the attempt, the epoch, the optimizer step, whether the step was committed (not dropped),
the sample indices it read, the groups alive, a digest of the weights every group holds alike (the outer weights
under DiLoCo) and one of its buffers (BatchNorm's running statistics and count), one of its own weights and buffers,
the loss, the time, and on an attempt's first line the seconds its heal took (None: it did not heal),
so that a test can compare groups step by step.
"""
import hashlib
import json
import os
import signal
import sys
import time

import torch
from torch import nn
from torch.utils.data import Dataset

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # tests/

from basetrainer.callbacks.model_checkpoint import ModelCheckpoint  # noqa: E402
from basetrainer.distributed import comm  # noqa: E402
from basetrainer.distributed.launch import launch  # noqa: E402
from basetrainer.engine.events import Callback  # noqa: E402
from support.toy import ToyTrainer, blobs, toy_cfg  # noqa: E402


class IndexedBlobs(Dataset):
    """The toy blobs, each sample with its index as a last feature (the model drops it)."""

    def __init__(self, size: int):
        self.blobs = blobs(size, seed=0)

    def __len__(self):
        return len(self.blobs)

    def __getitem__(self, index):
        x, y = self.blobs[index]
        return torch.cat([x, torch.tensor([float(index)])]), y


class WithoutIndex(nn.Module):
    def forward(self, x):
        return x[:, :-1]


class IndexedToy(ToyTrainer):
    def build_train_loader(self, cfg):
        return self.build_dataloader(IndexedBlobs(cfg["train_size"]), cfg["batch_size"], 0, shuffle=True)

    def build_test_loader(self, cfg):
        return None

    def build_model(self, cfg):
        torch.manual_seed(0)
        return self.build_model_parallel(nn.Sequential(WithoutIndex(), nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(),
                                                       nn.Linear(16, 4)))


class Record(Callback):
    """One line per batch (see the module docstring); and the faults this group's attempt is to suffer."""

    def __init__(self, path: str, group: int, attempt: int, faults: list):
        super().__init__()
        self.path, self.group, self.attempt = path, group, attempt
        self.faults = [f for f in faults if f["group"] == group and f["attempt"] == attempt
                       and f.get("rank", 0) == comm.get_rank()]
        self._dropped = 0

    def on_train_begin(self, logs=None):
        groups, first_step = self.trainer.replica_groups, self.state.global_step
        self._healed_in = groups.healed_in if groups is not None else None
        for fault in self.faults:
            fault["step"] += first_step  # steps of this attempt: a restarted group starts where the others are
            if fault["at"] == "allreduce":
                _kill_after(groups, "average_gradients", fault["step"], self.state)
            elif fault["at"] == "sync":
                _kill_after(groups.diloco, "_send", fault["step"], self.state)

    def on_train_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
        trainer, state = self.trainer, self.state
        groups = trainer.replica_groups
        dropped = groups.dropped_steps if groups is not None else state.skipped_steps
        committed, self._dropped = dropped == self._dropped, dropped
        model = trainer.model
        own = _digest(*model.parameters(), *model.buffers())
        with trainer.strategy.averaged_weights(model):
            weights, buffers = _digest(*model.parameters()), _digest(*model.buffers())
        line = {"tag": trainer.cfg.get("tag"), "attempt": self.attempt, "epoch": epoch, "step": state.global_step, "committed": committed,
                "indices": [int(i) for i in inputs[0][:, -1].tolist()],
                "alive": groups.participants[0] if groups is not None else None,
                "weights": weights, "buffers": buffers, "own": own,
                "loss": float(state.loss), "time": time.time(), "healed_in": self._healed_in}
        self._healed_in = None
        with open(self.path, "a") as out:
            out.write(json.dumps(line) + "\n")
        if any(f["at"] == "step" and f["step"] == state.global_step for f in self.faults):
            os.kill(os.getpid(), signal.SIGKILL)
        alone = groups is not None and groups.participants[0] < groups.options.replica_groups
        time.sleep(self.trainer.cfg.get("step_seconds_alone" if alone else "step_seconds", 0))


def _digest(*tensors) -> str:
    """The tensors' bytes, hashed: equal digests are bitwise equal tensors."""
    digest = hashlib.sha1()
    for tensor in tensors:
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def _kill_after(owner, method: str, step: int, state) -> None:
    """``owner.method`` kills this process when called after optimizer step ``step``."""
    original = getattr(owner, method)

    def dying(*args, **kwargs):
        if state.global_step >= step:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(*args, **kwargs)

    setattr(owner, method, dying)


def main(out_dir: str, overrides: dict, faults: list):
    given = (overrides.get("fault_tolerance") or {}).get("group_id")  # a group started by hand (or a scheduler)
    group = given if given is not None else int(os.environ.get("BASETRAINER_REPLICA_GROUP", "0"))  # 0: no groups
    attempt = overrides.pop("attempt", None)
    if attempt is None:
        attempt = int(os.environ.get("BASETRAINER_REPLICA_GROUP_RESTARTS")
                      or os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0)
    cfg = toy_cfg(num_epochs=2, train_size=192, batch_size=8, work_dir=os.path.join(out_dir, "work"))
    cfg.update(overrides)
    name = f"group{group}.jsonl" if comm.get_rank() == 0 else f"group{group}_rank{comm.get_rank()}.jsonl"
    record = Record(os.path.join(out_dir, name), group, attempt, faults)
    cfg["callbacks"] = [record]
    trainer = IndexedToy(cfg)
    trainer.callbacks.append(ModelCheckpoint(model_dir=os.path.join(cfg["work_dir"], "model"), every_n_iters=5))
    trainer.run()


if __name__ == "__main__":
    out, settings = sys.argv[1], json.loads(sys.argv[2])
    launch(main, settings.pop("processes", 1), args=(out, settings, json.loads(sys.argv[3]) if len(sys.argv) > 3 else []))
