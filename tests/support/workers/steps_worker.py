"""A job with two test sets, evaluated every few steps, and a prediction over 101 samples (before training).

    python tests/workers/steps_worker.py OUT.pt --procs 2

Rank 0 saves ``{"seen": {set: samples counted over all ranks}, "logs": logs, "predictions": tensor}``.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # tests/

from basetrainer.callbacks.losses_recorder import LossesRecorder  # noqa: E402
from basetrainer.distributed import comm  # noqa: E402
from basetrainer.distributed.launch import launch  # noqa: E402
from basetrainer.engine.events import Callback  # noqa: E402
from basetrainer.utils.batch import batch_size  # noqa: E402
from support.toy import ToyTrainer, blobs, toy_cfg  # noqa: E402


class CountSamples(Callback):
    """Counts the test samples of each set over all ranks."""

    def __init__(self):
        super().__init__()
        self.seen, self._count = {}, 0

    def on_test_begin(self, logs=None):
        self._count = 0

    def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
        self._count += batch_size(inputs)

    def on_test_end(self, logs=None):
        self.seen[self.state.eval_set] = int(comm.sum_over_ranks(self._count)[0])


class TwoSets(ToyTrainer):
    def build_test_loader(self, cfg):
        return {"val": self.build_dataloader(blobs(101, seed=1), 10, phase="test", shuffle=False),
                "hard": self.build_dataloader(blobs(37, seed=2), 8, phase="test", shuffle=False)}


def main(out):
    torch.set_num_threads(1)
    counter = CountSamples()
    trainer = TwoSets(toy_cfg(num_epochs=None, max_iters=6, eval_every_n_iters=3, batch_size=8,
                              callbacks=[LossesRecorder(), counter]))
    # before training: the same initial weights on every rank and in both jobs
    predictions = trainer.predict(trainer.build_dataloader(blobs(101, seed=3), 10, phase="test", shuffle=False))
    logs = trainer.run()
    if comm.is_main_process():
        torch.save({"seen": counter.seen, "logs": logs, "predictions": predictions}, out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--procs", type=int, default=1)
    args = parser.parse_args()
    launch(main, args.procs, args=(args.out,))
