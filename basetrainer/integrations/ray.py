"""Training on a Ray cluster: the same ``main(cfg)`` in Ray Train's ``TorchTrainer`` workers.

::

    from basetrainer.integrations.ray import fit
    result = fit(main, cfg, num_workers=4, use_gpu=True, max_failures=3)

or, from the shell, ``basetrainer train -c configs/config.yaml --ray 4``. Ray starts the workers and makes
their process group; each worker runs ``main(cfg)``, whose ``launch`` adopts that group
(:func:`basetrainer.distributed.process_group.run_in_adopted_group`) instead of making one. Every trainer the
workers build reports to Ray after each checkpoint it saves (:class:`RayReport`): the evaluation's metrics
and, from rank 0, the directory of the engine's checkpoint file. When a worker fails, Ray restarts the group
(up to ``max_failures`` times) and the run resumes from the last checkpoint reported. Ray is an extra
(``pip install "basetrainer[ray]"``); it is imported only here.
"""
import importlib
import importlib.util
import os
import re

from ..distributed import comm
from ..engine.added_callbacks import callbacks_added
from ..engine.events import LOWEST, Callback
from ..errors import ConfigError, LaunchError, one_line

RAY_EXTRA = 'pip install "basetrainer[ray]"'
STATE_FILE_KEY = "basetrainer_state_file"  # the checkpoint's metadata: which file of the directory to resume from


def import_ray():
    """``ray`` with Ray Train; a one-line ConfigError naming the pip command when it is not installed."""
    if importlib.util.find_spec("ray") is None or importlib.util.find_spec("ray.train") is None:
        raise ConfigError(f"running on a Ray cluster needs Ray Train: {RAY_EXTRA}")
    return importlib.import_module("ray")


def fit(main, cfg, num_workers: int, use_gpu: bool = False, max_failures: int = 0, storage_path=None,
        name: str = None):
    """Runs ``main(cfg)`` in ``num_workers`` Ray Train workers (one GPU each with ``use_gpu``, else CPU workers
    with gloo) and returns Ray's ``Result`` (its ``metrics``, ``checkpoint`` and ``error``).

    ``max_failures``: how many times Ray restarts the group after a worker fails; the restarted run resumes
    from the last checkpoint reported. ``storage_path``: where Ray keeps the reported checkpoints (a folder
    every node reaches; by default ``<cfg.work_dir>/ray``, else Ray's own default); ``name``: the run's folder
    in it. ``main`` and ``cfg`` must pickle, as Ray sends them to the workers; a worker whose machine has this
    process's working folder runs in it, so that relative paths in ``cfg`` mean the same. Without a Ray cluster to join
    (``RAY_ADDRESS``, or ``ray.init`` called before), Ray starts one on this machine.
    """
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ConfigError(f"num_workers must be a positive integer, got {num_workers!r}")
    import_ray()
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from .ray_backend import GlooAcrossNodes

    if storage_path is None and cfg.get("work_dir"):
        storage_path = os.path.join(cfg["work_dir"], "ray")
    storage_path = os.path.abspath(storage_path) if storage_path else None
    trainer = TorchTrainer(
        _run_in_worker, train_loop_config={"main": main, "cfg": cfg, "cwd": os.getcwd()},
        torch_config=GlooAcrossNodes(),  # gloo on the interface between the nodes, not on the host name's
        scaling_config=ScalingConfig(num_workers=num_workers, use_gpu=use_gpu),
        run_config=RunConfig(name=name, storage_path=storage_path, failure_config=FailureConfig(max_failures)))
    return trainer.fit()


def train_task(task, cfg, num_workers: int, max_failures: int = 0):
    """``basetrainer train ... --ray N``: the ``task`` module's ``train(cfg)`` (its config checked already) in
    ``num_workers`` Ray workers, one GPU each when the cluster has that many, else CPU workers. Refused in one
    line, before any work: ``distributed`` or several ``gpu_id`` (Ray starts the processes and places them), Ray
    not installed, a cluster it cannot join. The data a task writes on first use is written here, once, before
    the workers start; a run that fails is one line with the first line of Ray's error."""
    if cfg.get("distributed") or len(cfg.get("gpu_id") or ()) > 1:
        raise ConfigError(f"--ray {num_workers} with distributed {cfg.get('distributed')} and gpu_id "
                          f"{cfg.get('gpu_id')}: Ray starts the {num_workers} processes and gives each its device; "
                          f"drop --distributed and the list of gpu ids")
    ray = import_ray()
    if not ray.is_initialized():
        join_cluster(ray)
    prepare_data = getattr(task, "prepare_data", None)  # a task that writes its data on first use says so
    if prepare_data is not None:
        prepare_data(cfg)
    use_gpu = ray.cluster_resources().get("GPU", 0) >= num_workers
    result = fit(task.train, cfg, num_workers, use_gpu=use_gpu, max_failures=max_failures)
    if result.error is not None:
        raise LaunchError(f"the Ray run failed: {one_line(result.error)}")
    return result


def join_cluster(ray):
    """``ray.init()``: the cluster of ``RAY_ADDRESS``, else one on this machine. A cluster that cannot be joined
    (a wrong address, a token missing or not the cluster's) is one line naming it and the first line of Ray's
    reason."""
    try:
        ray.init()
    except ConnectionError as error:
        reason = _first_sentence_of_last_error(error.__cause__ or error)
        raise LaunchError(f"could not join the Ray cluster at {os.environ.get('RAY_ADDRESS', 'this machine')} "
                          f"({reason}); check RAY_ADDRESS, and where the cluster asks for a token give this machine "
                          f"RAY_AUTH_MODE=token and the cluster's token (RAY_AUTH_TOKEN, or ~/.ray/auth_token)"
                          ) from error


def _first_sentence_of_last_error(error) -> str:
    """Ray's reason for a failed connection embeds the traceback of the error under it: that error's first sentence
    (``RPC error: InvalidAuthToken: Authentication token is missing or incorrect``), else the message's one line."""
    raised = [line.strip() for line in str(error).splitlines() if re.match(r"\s*[\w.]+(Error|Exception): ", line)]
    return raised[-1].split(": ", 1)[1].split(". ")[0] if raised else one_line(error)


def _run_in_worker(config):
    """What each Ray worker runs: ``main(cfg)`` with :class:`RayReport` added to every trainer, resumed from the
    last reported checkpoint when Ray restarted the group after a failure."""
    import ray.train

    main, cfg = config["main"], config["cfg"]  # this worker's own copy: setting resume here changes no other
    if os.path.isdir(config["cwd"]):  # Ray starts it in a folder of its own: relative paths mean what they did
        os.chdir(config["cwd"])
    checkpoint = ray.train.get_checkpoint()
    with callbacks_added(RayReport):
        if checkpoint is None:
            return main(cfg)
        with checkpoint.as_directory() as folder:
            cfg["resume"] = os.path.join(folder, checkpoint.get_metadata()[STATE_FILE_KEY])
            return main(cfg)


class RayReport(Callback):
    """Reports to Ray Train after each checkpoint the trainer saves (at a batch's end or the epoch's), once the
    checkpoint callbacks have saved: the last evaluation's metrics (``test/<name>``), the epoch's
    (``train/<name>``), the epoch, the optimizer step and the lr; and from rank 0 the directory of the
    checkpoint file, which Ray copies to its storage. Every rank reports, as Ray asks."""

    priority = LOWEST + 10  # after ModelCheckpoint

    def __init__(self):
        super().__init__()
        self._reported_position = None

    def on_batch_end(self, batch, logs=None):
        self._report_new_checkpoint(logs or {})

    def on_epoch_end(self, epoch, logs=None):
        self._report_new_checkpoint(logs or {})

    def _report_new_checkpoint(self, logs):
        import ray.train

        checkpoints = self.trainer.checkpoints
        position = checkpoints.saved_position
        if position is None or position == self._reported_position:
            return
        self._reported_position = position
        checkpoint = None
        if comm.is_main_process():
            checkpoint = ray.train.Checkpoint.from_directory(os.path.dirname(os.path.abspath(checkpoints.path)))
            checkpoint.set_metadata({STATE_FILE_KEY: os.path.basename(checkpoints.path)})
        ray.train.report(reported_metrics(self.state, logs), checkpoint=checkpoint,
                         delete_local_checkpoint_after_upload=False)


def reported_metrics(state, logs) -> dict:
    """The numbers of ``logs`` as Ray's flat metrics: ``train/<name>``, ``test/<name>`` (``test/<set>/<name>``
    with several test sets), ``lr``, ``epoch`` (from 1) and ``step`` (optimizer steps)."""
    metrics = {"epoch": state.epoch + 1, "step": state.global_step}
    if isinstance(logs.get("lr"), (int, float)):
        metrics["lr"] = logs["lr"]
    for phase in ("train", "test"):
        metrics.update(_flat(phase, logs.get(phase) or {}))
    return metrics


def _flat(prefix, values) -> dict:
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(_flat(f"{prefix}/{key}", value))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[f"{prefix}/{key}"] = value
    return flat
