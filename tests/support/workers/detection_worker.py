"""A detection run that tests start as a process: ``DetectionTrainer`` on the config arguments given, in this
process, SIGKILLed at the end of batch B of epoch E (both from 0) with ``--kill-at E:B``, or sent the stop signal
NAME there with ``--signal-at E:B:NAME`` (it exits as ``basetrainer train`` does: one ``error:`` line and exit code
75); a run that ends saves its final weights and its last train and test values to ``--out``::

    python tests/support/workers/detection_worker.py --out W.pt [--kill-at E:B | --signal-at E:B:NAME] ARGUMENT ...
"""
import argparse
import os
import signal

import torch

from basetrainer.checkpoint import model_state_dict
from basetrainer.engine.events import Callback
from basetrainer.errors import BaseTrainerError
from basetrainer.tasks.detection.config import parse_config
from basetrainer.tasks.detection.trainer import DetectionTrainer
from basetrainer.utils.console import exit_with


class SignalAt(Callback):
    """Sends this process ``signal_name`` at the end of batch ``batch`` of epoch ``epoch``."""

    def __init__(self, epoch, batch, signal_name):
        super().__init__()
        self.at, self.signal = (epoch, batch), getattr(signal, signal_name)

    def on_batch_end(self, batch, logs=None):
        if (self.state.epoch, batch) == self.at:
            os.kill(os.getpid(), self.signal)


class FaultedDetectionTrainer(DetectionTrainer):
    fault = None  # (epoch, batch, signal name)

    def build_callbacks(self, cfg, **kwargs):
        return [*super().build_callbacks(cfg), SignalAt(*self.fault) if self.fault else None]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--kill-at", default=None)
    parser.add_argument("--signal-at", default=None)
    args, config_arguments = parser.parse_known_args()
    if args.kill_at or args.signal_at:
        epoch, batch, *name = (args.signal_at or f"{args.kill_at}:SIGKILL").split(":")
        FaultedDetectionTrainer.fault = (int(epoch), int(batch), *name)
    trainer = FaultedDetectionTrainer(parse_config(config_arguments))
    try:
        logs = trainer.run()
    except BaseTrainerError as error:
        exit_with(error)
    torch.save({"weights": model_state_dict(trainer.model), "logs": {"train": logs["train"], "test": logs["test"]}},
               args.out)


if __name__ == "__main__":
    main()
