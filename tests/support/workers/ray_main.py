"""The ``main(cfg)`` the Ray tests run, in Ray Train's workers and under ``launch`` alike.

A toy classifier (:class:`support.toy.ToyTrainer`) with ``last.pth`` at every epoch's end in ``work_dir/model``;
rank 0 writes the weights after each epoch to ``out/epoch<n>.pt`` (from 1), and at the start of training an empty
``out/started_at_epoch<n>`` (from 0: where that attempt began). With ``kill_at_step``, rank 1 kills itself
(SIGKILL) after that step on the first attempt only: the attempt that creates ``kill_marker``. It waits 2 s
before it dies, so that Ray's controller, which polls the workers (every 0.2 s in the tests), has the last
checkpoint reported: a report is the controller's once it polled.
"""
import os
import signal
import time

import torch

from basetrainer.callbacks.model_checkpoint import ModelCheckpoint
from basetrainer.distributed import comm
from basetrainer.engine.events import Callback
from support.toy import ToyTrainer


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


class KillOnce(Callback):
    """SIGKILLs this process at the end of ``step``, unless some process of the job did it already."""

    def __init__(self, step, marker):
        super().__init__()
        self.step, self.marker = step, marker

    def on_batch_end(self, batch, logs=None):
        if self.state.global_step == self.step and comm.get_rank() == 1:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return
            time.sleep(2.0)
            os.kill(os.getpid(), signal.SIGKILL)


def main(cfg):
    torch.set_num_threads(1)  # two workers share two cores
    callbacks = [ModelCheckpoint(model_dir=os.path.join(cfg["work_dir"], "model"), save_best_k=0, save_final=False),
                 SaveEachEpoch(cfg["out"])]
    if cfg.get("kill_at_step"):
        callbacks.append(KillOnce(cfg["kill_at_step"], cfg["kill_marker"]))
    ToyTrainer({**cfg, "callbacks": callbacks}).run()
