"""The tuning tools under DDP: 2 processes, one launch.

    python tests/support/workers/tuning_worker.py OUT_DIR --procs 2

Every rank runs the range test and the batch-size finder on a toy trainer, then trains it, and trains a fresh
one; it saves ``OUT_DIR/rank<R>.pt``: the range test's rates, losses and suggestion, the finder's sizes and
result, and whether the trained-after-the-tools weights equal the fresh run's bitwise.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # tests/

from basetrainer.distributed import comm  # noqa: E402
from basetrainer.distributed.launch import launch  # noqa: E402
from basetrainer.tuning import find_batch_size, lr_find  # noqa: E402
from support.toy import ToyTrainer, toy_cfg  # noqa: E402


def trained_weights(trainer):
    trainer.run()
    return {name: value.clone() for name, value in trainer.model.state_dict().items()}


def main(out_dir):
    torch.set_num_threads(1)
    cfg = toy_cfg(num_epochs=2, train_size=128, test_size=0, batch_size=8)
    fresh = trained_weights(ToyTrainer(cfg))
    probed = ToyTrainer(cfg)
    found = lr_find(probed, min_lr=1e-4, max_lr=100, num_steps=30)
    sized = find_batch_size(probed, max_memory=64, steps=1, max_trials=4)
    after = trained_weights(probed)
    torch.save({"lrs": found.lrs, "losses": found.losses, "suggestion": found.suggestion, "stopped": found.stopped,
                "sizes": [trial.batch_size for trial in sized.trials], "largest": sized.largest,
                "same_run": all(torch.equal(after[name], fresh[name]) for name in fresh)},
               os.path.join(out_dir, f"rank{comm.get_rank()}.pt"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--procs", type=int, default=2)
    args = parser.parse_args()
    launch(main, args.procs, args=(args.out_dir,))
