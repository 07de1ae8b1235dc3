"""Three jobs in one launch for the checks of ``lr_scaling`` and ``target`` under several processes.

    python tests/support/workers/target_worker.py OUT_DIR CHECKPOINT --procs 2

- ``scaling``: the toy trainer with 2 accumulated batches of 16 per process and ``lr_scaling`` linear over 16;
- ``target``: a score that is the optimizer steps taken, evaluated every 2 steps, with ``target`` score >= 3 and
  ``stop: true``, checkpointing into OUT_DIR/target;
- ``resume``: the run of CHECKPOINT (written by one process with batches of 15 and ``lr_scaling`` linear over
  15) resumed on these processes, whose global batch of 15 they cannot share: it becomes 2 x 15.

Rank 0 saves ``{job: {what each rank saw}}`` to OUT_DIR/results.pt and logs to OUT_DIR/train.log.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # tests/

from basetrainer.callbacks.model_checkpoint import ModelCheckpoint  # noqa: E402
from basetrainer.distributed import comm  # noqa: E402
from basetrainer.distributed.launch import launch  # noqa: E402
from basetrainer.engine.events import HIGH, Callback  # noqa: E402
from basetrainer.utils.log import set_logger  # noqa: E402
from support.toy import ToyTrainer, toy_cfg  # noqa: E402


class StepScore(Callback):
    """Publishes ``logs["test"]["score"]``: the optimizer steps taken so far."""

    priority = HIGH

    def publishes(self):
        return ("score",)

    def on_test_end(self, logs=None):
        logs["test"]["score"] = float(self.state.global_step)


class LRAtStart(Callback):
    def on_train_begin(self, logs=None):
        self.lr = self.trainer.optimizer.param_groups[0]["lr"]


def main(out_dir, checkpoint):
    torch.set_num_threads(1)
    set_logger(level="info", logfile=os.path.join(out_dir, "train.log"), is_main_process=comm.is_main_process())
    results = {}

    scaling = ToyTrainer(toy_cfg(accumulate_grad_batches=2, lr_scaling={"rule": "linear", "base_batch_size": 16}))
    results["scaling"] = comm.all_gather({"lr": scaling.optimizer.param_groups[0]["lr"],
                                          "arithmetic": scaling.lr_scaling.arithmetic()})

    work_dir = os.path.join(out_dir, "target")
    target = ToyTrainer(toy_cfg(work_dir=work_dir, num_epochs=3, eval_every_n_iters=2,
                                target={"metric": "score", "value": 3, "stop": True},
                                callbacks=[StepScore(), ModelCheckpoint(model_dir=os.path.join(work_dir, "model"))]))
    target.run()
    results["target"] = comm.all_gather({"record": target.callbacks[-1].record, "step": target.state.global_step})

    start = LRAtStart()
    resumed = ToyTrainer(toy_cfg(num_epochs=2, batch_size=15, resume=checkpoint, callbacks=[start],
                                 lr_scaling={"rule": "linear", "base_batch_size": 15}))
    resumed.run()
    results["resume"] = comm.all_gather({"lr": start.lr})
    if comm.is_main_process():
        torch.save(results, os.path.join(out_dir, "results.pt"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("checkpoint")
    parser.add_argument("--procs", type=int, default=2)
    args = parser.parse_args()
    launch(main, args.procs, args=(args.out_dir, args.checkpoint))
