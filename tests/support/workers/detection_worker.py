"""A detection run that tests start as a process: ``DetectionTrainer`` on the config arguments given, in this
process, SIGKILLed at the end of batch B of epoch E (both from 0) with ``--kill-at E:B``; a run that ends saves
its final weights and its last train and test values to ``--out``::

    python tests/support/workers/detection_worker.py --out W.pt [--kill-at E:B] CONFIG_ARGUMENT ...
"""
import argparse
import os
import signal

import torch

from basetrainer.checkpoint import model_state_dict
from basetrainer.engine.events import Callback
from basetrainer.tasks.detection.config import parse_config
from basetrainer.tasks.detection.trainer import DetectionTrainer


class KillAt(Callback):
    def __init__(self, epoch, batch):
        super().__init__()
        self.at = (epoch, batch)

    def on_batch_end(self, batch, logs=None):
        if (self.state.epoch, batch) == self.at:
            os.kill(os.getpid(), signal.SIGKILL)


class KilledDetectionTrainer(DetectionTrainer):
    kill_at = None

    def build_callbacks(self, cfg, **kwargs):
        return [*super().build_callbacks(cfg), KillAt(*self.kill_at) if self.kill_at else None]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--kill-at", default=None)
    args, config_arguments = parser.parse_known_args()
    KilledDetectionTrainer.kill_at = tuple(map(int, args.kill_at.split(":"))) if args.kill_at else None
    trainer = KilledDetectionTrainer(parse_config(config_arguments))
    logs = trainer.run()
    torch.save({"weights": model_state_dict(trainer.model), "logs": {"train": logs["train"], "test": logs["test"]}},
               args.out)


if __name__ == "__main__":
    main()
