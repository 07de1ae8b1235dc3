"""Weights & Biases: a run's parameters, metrics and files in a W&B run (``pip install "basetrainer[wandb]"``)."""
import os

from ..errors import ConfigError
from .base import Logger, epoch_scalars, require

MODES = ("online", "offline", "disabled")  # what the wandb_mode key takes; null: W&B's own choice


class WandbLogger(Logger):
    """Logs a run to W&B: the flattened config as the run's config, the per-step and
    per-epoch scalars as its history (``step``: the global step), and the files LogHistory
    hands over with ``run.save``.

    The run goes to ``project`` (else ``WANDB_PROJECT``, else "basetrainer"), its files
    under ``WANDB_DIR``, else ``work_dir``; it is named after the work_dir. ``mode`` is
    W&B's: ``offline`` keeps the run on this machine (``wandb sync`` uploads it later),
    ``disabled`` logs nothing; None leaves the choice to W&B (``WANDB_MODE``, else
    online). :func:`check_login` says before any work whether an online run could
    start. The run id travels in the checkpoint: a resumed run
    continues the same W&B run (``resume="allow"``); W&B drops the values of steps it
    already has, so steps trained again after a resume keep their first values.
    """

    name = "wandb"

    def __init__(self, project=None, *, work_dir=".", run_name=None, mode=None):
        require("wandb", "wandb")
        self.project = project
        self.mode = check_mode(mode)
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
                               dir=folder, name=self.run_name, id=self.run_id, mode=self.mode,
                               resume="allow" if self.run_id else None, reinit="create_new")
        self.run_id = self._run.id

    def log_params(self, params):
        self._run.config.update(params, allow_val_change=True)

    def log_metrics(self, scalars, step):
        self._run.log(scalars, step=step)

    def log_epoch(self, record, step):
        self._run.log(epoch_scalars(record), step=step)

    def log_text(self, name, text, step):
        import html

        import wandb

        self._run.log({name: wandb.Html(f"<pre>{html.escape(text)}</pre>")}, step=step)

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


def check_mode(mode):
    """``mode`` if it is one of ``MODES`` or None, else a one-line error."""
    if mode is not None and mode not in MODES:
        raise ConfigError(f"wandb_mode: {mode!r} is not one of {', '.join(MODES)} (or null: W&B's own choice)")
    return mode


def check_login(mode=None) -> None:
    """Refuses, in one line, a W&B run that would stop at its start for want of a login: an online
    run (``mode``, else ``WANDB_MODE``, else online) on a machine where none of the places W&B
    reads credentials from holds any. Reads no server, writes nothing."""
    mode = check_mode(mode) or os.environ.get("WANDB_MODE") or "online"
    if mode in ("offline", "dryrun", "disabled") or _may_have_credentials():
        return
    raise ConfigError("loggers: wandb has no API key on this machine: log in with `wandb login` (or set "
                      "WANDB_API_KEY), or keep the run on this machine with wandb_mode=offline (wandb sync uploads "
                      "it later)")


def _may_have_credentials() -> bool:
    """Whether W&B may find credentials: ``WANDB_API_KEY``, an identity token file, the .netrc that
    ``wandb login`` writes (``NETRC``, else ~/.netrc or ~/_netrc), or a W&B settings file (the
    user's, or the workspace's of ``wandb offline``), which may hold a key, another host or the
    offline mode. Where any of them exists, W&B's own start decides (and a failure there costs
    only the logger, see :class:`~.fanout.LoggerFanOut`)."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    home = os.path.expanduser("~")
    netrc = os.environ.get("NETRC")
    places = [netrc] if netrc else [os.path.join(home, ".netrc"), os.path.join(home, "_netrc")]
    places += [os.path.join(os.environ.get("WANDB_CONFIG_DIR") or os.path.join(home, ".config", "wandb"), "settings"),
               os.path.join(os.environ.get("WANDB_DIR") or os.getcwd(), "wandb", "settings")]
    return any(os.path.isfile(path) for path in places)
