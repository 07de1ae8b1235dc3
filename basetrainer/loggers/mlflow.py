"""MLflow: a run's parameters, metrics and files in an MLflow tracking store (``pip install "basetrainer[mlflow]"``)."""
import os
import pathlib
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request

from ..errors import ConfigError
from ..utils.log import get_logger
from .base import Logger, epoch_scalars, require

SERVER_TIMEOUT_SECS = 10.0  # how long check_store waits for a tracking server to answer


class MLflowLogger(Logger):
    """Logs a run to MLflow: the flattened config as parameters, the per-step and per-epoch
    scalars as metrics (on the global-step axis), and the files LogHistory hands over as artifacts.

    The store is ``tracking_uri``, else ``MLFLOW_TRACKING_URI``, else a local
    ``sqlite:///<work_dir>/mlflow.db`` whose artifacts go to ``<work_dir>/mlartifacts``
    (``mlflow ui --backend-store-uri sqlite:///<work_dir>/mlflow.db`` shows it). The
    experiment is ``experiment``, else ``MLFLOW_EXPERIMENT_NAME``, else "basetrainer";
    the run is named after the work_dir.

    :func:`check_store` says before any work whether the store can be reached and written.
    The run id travels in the checkpoint: a resumed run continues the same MLflow run.
    MLflow keeps every value it is given, so the steps a run resumed from an older
    checkpoint trains again have their values twice. Only ``MlflowClient`` is used: the
    user's active run (``mlflow.start_run``) and MLflow's global settings are left alone.

    Metrics wait in a queue and go to the store in one request at each epoch end, at the
    end, and once the oldest is ``HAND_OVER_SECS`` old: a request per log line would cost
    a database write (or a round trip to a server) every ``log_freq`` batches.
    """

    name = "mlflow"
    HAND_OVER_SECS = 30.0

    def __init__(self, tracking_uri=None, *, work_dir=".", experiment=None, run_name=None):
        require("mlflow", "mlflow")
        self.tracking_uri = tracking_uri
        self.work_dir = os.path.abspath(str(work_dir))
        self.experiment = experiment
        self.run_name = run_name or os.path.basename(self.work_dir)
        self.run_id = None
        self._client = None
        self._metrics = []  # mlflow Metric objects not yet sent

    def start(self, history, resumed, step):
        from mlflow.tracking import MlflowClient

        local = not (self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI"))
        uri = self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or self._local_store()
        self._client = MlflowClient(tracking_uri=uri)
        if self.run_id is not None:
            if self._run_exists(self.run_id):
                self._client.update_run(self.run_id, status="RUNNING")
                return
            get_logger().warning("MLflow run %s of the checkpoint is not in %s: logging to a new run",
                                 self.run_id, uri)
        experiment_id = self._experiment_id(local)
        self.run_id = self._client.create_run(experiment_id, run_name=self.run_name).info.run_id

    def log_params(self, params):
        from mlflow.entities import Param
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

        self._client.log_batch(self.run_id, params=[Param(key, value[:MAX_PARAM_VAL_LENGTH])
                                                    for key, value in params.items()])

    def log_metrics(self, scalars, step):
        self._queue(scalars, step)
        if time.time() - self._metrics[0].timestamp / 1000 >= self.HAND_OVER_SECS:
            self._send()

    def log_epoch(self, record, step):
        self._queue(epoch_scalars(record), step)
        self._send()

    def log_text(self, name, text, step):
        self._client.log_text(self.run_id, text, f"{name}/step_{step:09d}.txt")

    def log_artifact(self, path):
        self._client.log_artifact(self.run_id, path)

    def close(self, failed=False):
        if self._client is None:
            return
        self._send()
        self._client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")
        self._client = None

    def state_dict(self):
        return {"run_id": self.run_id} if self.run_id else {}

    def load_state_dict(self, state):
        self.run_id = state.get("run_id")

    def _queue(self, scalars, step):
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._metrics += [Metric(key, float(value), now, step) for key, value in scalars.items()]

    def _send(self):
        if self._metrics:
            self._client.log_batch(self.run_id, metrics=self._metrics)
            self._metrics = []

    def _local_store(self) -> str:
        os.makedirs(self.work_dir, exist_ok=True)
        return f"sqlite:///{os.path.join(self.work_dir, 'mlflow.db')}"

    def _experiment_id(self, local: bool) -> str:
        name = self.experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or "basetrainer"
        experiment = self._client.get_experiment_by_name(name)
        if experiment is not None:
            return experiment.experiment_id
        # A local store keeps its artifacts beside it, not in ./mlruns of whatever folder the run started in.
        location = pathlib.Path(self.work_dir, "mlartifacts").as_uri() if local else None
        return self._client.create_experiment(name, artifact_location=location)

    def _run_exists(self, run_id) -> bool:
        from mlflow.exceptions import MlflowException

        try:
            self._client.get_run(run_id)
        except MlflowException:
            return False
        return True


def check_store(tracking_uri=None, work_dir=".") -> None:
    """Refuses, in one line, an MLflow store the run could not log to: a tracking server (``http``,
    ``https``) that does not answer, a local store (a folder, a ``file:`` URI, a ``sqlite:`` file) that
    cannot be written. The store is :class:`MLflowLogger`'s (``tracking_uri``, else
    ``MLFLOW_TRACKING_URI``, else SQLite under ``work_dir``); other kinds (databases, Databricks)
    are left to MLflow's start. Makes nothing."""
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        _check_writable(os.path.join(os.path.abspath(str(work_dir)), "mlflow.db"), f"work_dir {work_dir}",
                        "choose a writable work_dir")
        return
    given = f"{'mlflow_tracking_uri' if tracking_uri else 'MLFLOW_TRACKING_URI'} {uri}"
    otherwise = "point mlflow_tracking_uri at a place that can be written, or set it to null for a store under work_dir"
    scheme = urllib.parse.urlsplit(uri).scheme.lower()
    if scheme in ("http", "https"):
        _check_server(uri, given)
    elif scheme == "sqlite" and ":///" in uri:  # sqlite:///relative.db, sqlite:////absolute.db
        _check_writable(uri.split(":///", 1)[1], given, otherwise)
    elif scheme == "file":
        _check_writable(urllib.request.url2pathname(urllib.parse.urlsplit(uri).path), given, otherwise, folder=True)
    elif len(scheme) <= 1:  # a path (a Windows drive letter reads as a one-letter scheme)
        _check_writable(uri, given, otherwise, folder=True)


def _check_server(uri, given) -> None:
    """Any HTTP answer will do (MLflow's /health, or a 401 of a server behind a login): only a server that
    does not answer is refused. A TLS failure is left to MLflow, which may be told to trust the certificate."""
    try:
        urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=SERVER_TIMEOUT_SECS).close()
        return
    except urllib.error.HTTPError:
        return
    except OSError as error:  # URLError too: no connection, no such host, no answer in time
        reason = getattr(error, "reason", error)
        if isinstance(reason, ssl.SSLError):
            return
    reason = getattr(reason, "strerror", None) or str(reason)
    raise ConfigError(f"{given}: the MLflow tracking server does not answer ({reason}); start it (mlflow server), "
                      f"or set mlflow_tracking_uri to one that answers, or to null for a store under work_dir")


def _check_writable(path, given, otherwise, folder=False) -> None:
    """That ``path`` (a file, or a ``folder``) can be written, or made in the nearest folder that exists."""
    path = os.path.abspath(path)
    if os.path.exists(path):
        problem = None
        if os.path.isdir(path) != folder:
            problem = f"{path} is a {'file' if folder else 'folder'}"
        elif not os.access(path, os.W_OK):
            problem = f"{path} is read-only"
    else:
        existing = os.path.dirname(path)
        while not os.path.exists(existing):
            existing = os.path.dirname(existing)
        problem = (f"{existing} is a file" if not os.path.isdir(existing)
                   else None if os.access(existing, os.W_OK | os.X_OK) else f"{existing} is read-only")
    if problem:
        raise ConfigError(f"{given}: MLflow cannot write its store there ({problem}); {otherwise}")
