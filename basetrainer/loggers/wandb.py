"""Weights & Biases: a run's parameters, metrics and files in a W&B run (``pip install "basetrainer[wandb]"``)."""
import os

from .base import Logger, epoch_scalars, require


class WandbLogger(Logger):
    """Logs a run to W&B: the flattened config as the run's config, the per-step and
    per-epoch scalars as its history (``step``: the global step), and the files LogHistory
    hands over with ``run.save``.

    The run goes to ``project`` (else ``WANDB_PROJECT``, else "basetrainer"), its files
    under ``WANDB_DIR``, else ``work_dir``; it is named after the work_dir. W&B's own
    settings apply as usual: ``WANDB_MODE=offline`` keeps it on this machine (``wandb
    sync`` uploads it later). The run id travels in the checkpoint: a resumed run
    continues the same W&B run (``resume="allow"``); W&B drops the values of steps it
    already has, so steps trained again after a resume keep their first values.
    """

    name = "wandb"

    def __init__(self, project=None, *, work_dir=".", run_name=None):
        require("wandb", "wandb")
        self.project = project
        self.work_dir = os.path.abspath(str(work_dir))
        self.run_name = run_name or os.path.basename(self.work_dir)
        self.run_id = None
        self._run = None

    def start(self, history, resumed, step):
        import wandb

        folder = os.environ.get("WANDB_DIR") or self.work_dir
        os.makedirs(folder, exist_ok=True)
        # create_new: a run of the user's own in this process is neither finished nor reused
        self._run = wandb.init(project=self.project or os.environ.get("WANDB_PROJECT") or "basetrainer",
                               dir=folder, name=self.run_name, id=self.run_id,
                               resume="allow" if self.run_id else None, reinit="create_new")
        self.run_id = self._run.id

    def log_params(self, params):
        self._run.config.update(params, allow_val_change=True)

    def log_metrics(self, scalars, step):
        self._run.log(scalars, step=step)

    def log_epoch(self, record, step):
        self._run.log(epoch_scalars(record), step=step)

    def log_artifact(self, path):
        self._run.save(path, base_path=os.path.dirname(os.path.abspath(path)), policy="now")

    def close(self, failed=False):
        if self._run is not None:
            self._run.finish(exit_code=1 if failed else 0)
            self._run = None

    def state_dict(self):
        return {"run_id": self.run_id} if self.run_id else {}

    def load_state_dict(self, state):
        self.run_id = state.get("run_id")
