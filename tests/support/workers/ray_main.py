"""The ``main(cfg)`` the Ray tests run, in Ray Train's workers and under ``launch`` alike, and the driver that runs it
on a Ray cluster (``python -m support.workers.ray_main SETTINGS.json``, on a machine of the cluster).

A toy classifier (:class:`support.toy.ToyTrainer`) with ``last.pth`` at every epoch's end in ``work_dir/model``;
rank 0 writes the weights after each epoch to ``out/epoch<n>.pt`` (from 1), and at the start of training an empty
``out/started_at_epoch<n>`` (from 0: where that attempt began). With ``pause_at_step``, every rank of the first
attempt (the one that starts at epoch 0) stops after that step, writes ``out/paused_rank<r>`` and sleeps: the test
kills a machine while it sleeps. The attempt Ray starts after it resumes past that step and goes on.
"""
import json
import os
import sys
import time

import torch

from basetrainer.callbacks.model_checkpoint import ModelCheckpoint
from basetrainer.distributed import comm
from basetrainer.engine.events import Callback
from support.toy import ToyTrainer

PAUSE_SECONDS = 600  # longer than any test waits: the pause ends with the machine's death or Ray's stopping the group


class SaveEachEpoch(Callback):
    """Rank 0 marks where training starts (``folder/started_at_epoch<n>``) and writes the weights at each epoch's
    end to ``folder/epoch<n>.pt``."""

    def __init__(self, folder):
        super().__init__()
        self.folder = folder

    def on_train_begin(self, logs=None):
        if comm.is_main_process():
            open(os.path.join(self.folder, f"started_at_epoch{self.state.start_epoch}"), "w").close()

    def on_epoch_end(self, epoch, logs=None):
        if comm.is_main_process():
            torch.save(self.trainer.export_weights(), os.path.join(self.folder, f"epoch{epoch + 1}.pt"))


class PauseOnce(Callback):
    """After optimizer step ``step`` of an attempt that started at epoch 0, writes ``folder/paused_rank<r>`` and
    sleeps."""

    def __init__(self, step, folder):
        super().__init__()
        self.step, self.folder = step, folder

    def on_batch_end(self, batch, logs=None):
        if self.state.global_step == self.step and self.state.start_epoch == 0:
            open(os.path.join(self.folder, f"paused_rank{comm.get_rank()}"), "w").close()
            time.sleep(PAUSE_SECONDS)


def main(cfg):
    torch.set_num_threads(1)  # the workers share the machine's cores
    callbacks = [ModelCheckpoint(model_dir=os.path.join(cfg["work_dir"], "model"), save_best_k=0, save_final=False),
                 SaveEachEpoch(cfg["out"])]
    if cfg.get("pause_at_step"):
        callbacks.append(PauseOnce(cfg["pause_at_step"], cfg["out"]))
    ToyTrainer({**cfg, "callbacks": callbacks}).run()


def fit_and_record(settings_file):
    """Runs :func:`main` on the Ray cluster of ``RAY_ADDRESS`` with the settings of ``settings_file`` (``cfg``,
    ``num_workers``, ``max_failures``, ``storage_path``) and writes what Ray returned to ``cfg["out"]/result.json``:
    the error (None or its text), the last metrics reported and the epoch of the checkpoint Ray holds."""
    from basetrainer.integrations.ray import fit

    with open(settings_file) as f:
        settings = json.load(f)
    result = fit(main, settings["cfg"], settings["num_workers"], max_failures=settings["max_failures"],
                 storage_path=settings["storage_path"])
    checkpoint_epoch = None
    if result.checkpoint is not None:
        with result.checkpoint.as_directory() as folder:
            checkpoint_epoch = torch.load(os.path.join(folder, "last.pth"), weights_only=False)["epoch"]
    with open(os.path.join(settings["cfg"]["out"], "result.json"), "w") as f:
        json.dump({"error": None if result.error is None else str(result.error), "metrics": result.metrics,
                   "checkpoint_epoch": checkpoint_epoch}, f)


if __name__ == "__main__":
    from support.workers.ray_main import fit_and_record as by_name  # main pickled by its module's name, not by value

    by_name(sys.argv[1])
