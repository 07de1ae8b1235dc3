"""A text run that tests start as a process: ``TextTrainer`` on the config arguments given, in this process,
SIGKILLed at the end of batch B of epoch E (both from 0) with ``--kill-at E:B``; a run that ends saves the
weights that train, its last train and test values (less the tokens per second, a time) and the names of the
optimizer's parameters to ``--out``::

    python tests/support/workers/text_worker.py --out W.pt [--kill-at E:B] ARGUMENT ...
"""
import argparse
import os
import signal

import torch

from basetrainer.checkpoint import model_state_dict
from basetrainer.engine.events import Callback
from basetrainer.errors import BaseTrainerError
from basetrainer.parallel import unwrap_model
from basetrainer.tasks.text.config import parse_config
from basetrainer.tasks.text.trainer import TextTrainer
from basetrainer.utils.console import exit_with


class KillAt(Callback):
    """SIGKILLs this process at the end of batch ``batch`` of epoch ``epoch``."""

    def __init__(self, epoch, batch):
        super().__init__()
        self.at = (epoch, batch)

    def on_batch_end(self, batch, logs=None):
        if (self.state.epoch, batch) == self.at:
            os.kill(os.getpid(), signal.SIGKILL)


class KilledTextTrainer(TextTrainer):
    kill_at = None

    def build_callbacks(self, cfg, **kwargs):
        return [*super().build_callbacks(cfg), KillAt(*self.kill_at) if self.kill_at else None]


def without_times(values: dict) -> dict:
    return {key: value for key, value in values.items() if key != "tokens_per_s"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--kill-at", default=None)
    args, config_arguments = parser.parse_known_args()
    if args.kill_at:
        KilledTextTrainer.kill_at = tuple(int(part) for part in args.kill_at.split(":"))
    trainer = KilledTextTrainer(parse_config(config_arguments))
    try:
        logs = trainer.run()
    except BaseTrainerError as error:
        exit_with(error)
    names = {id(p): name for name, p in unwrap_model(trainer.model).named_parameters()}
    trained = {names[id(p)] for group in trainer.optimizer.param_groups for p in group["params"]}
    weights = model_state_dict(trainer.model)
    torch.save({"weights": {key: value for key, value in weights.items() if key in trained},
                "all_weights": sorted(weights), "optimized": sorted(trained),
                "logs": {"train": without_times(logs["train"]), "test": logs["test"]}}, args.out)


if __name__ == "__main__":
    main()
