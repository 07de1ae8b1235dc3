"""Live fault tolerance: replica groups that train together through torchft, and go on when one dies.

The job is split into ``fault_tolerance.replica_groups`` groups, each a whole copy of the model (one process,
or several under DDP or FSDP inside the group). Before each step the groups alive form a quorum through the
lighthouse; they average their gradients (or, under ``local_sgd: {mode: diloco}``, take an outer step every few
steps: :mod:`.diloco`), and the step counts only when every group alive completed it (:mod:`basetrainer.fault_tolerance.replica_groups`).
A group that dies drops out of the next quorum and the others go on, reading its share of the data
(:mod:`.batches`); restarted, it takes the training state of a live group at its first quorum, from memory, and
continues alike. The processes (the lighthouse, one command per group, their restarts) are
:mod:`basetrainer.distributed.replica_groups`'s.

torchft is an extra (``pip install "basetrainer[torchft]"``), imported only when ``fault_tolerance`` is set.
"""
import dataclasses
import os

from ..distributed.interfaces import VARIABLE as GLOO_INTERFACE
from ..distributed.interfaces import address_of, choose_gloo_interface
from ..distributed.lighthouse import lighthouse_url
from ..distributed.replica_groups import replica_group_from_environment, replica_job_from_environment
from ..errors import ConfigError
from .messages import say
from .options import DiLoCoOptions, FaultTolerance

__all__ = ["DiLoCoOptions", "FaultTolerance", "start_replica_groups"]



def start_replica_groups(options, device, cfg):
    """This process's :class:`~.replica_groups.ReplicaGroups` for the trainer's ``options`` (a LoopOptions), or
    None without ``fault_tolerance``, with the options to train with. Each group writes its run directory under
    ``work_dir/replica_groups/<group>`` (its logs, checkpoints, config), which ``cfg.work_dir`` then names too, so
    that the groups' files never collide and each resumes from its own (where the others' are not under it: a DiLoCo
    group's own weights are its alone). In a group the local supervisor started, what libraries write to stderr goes
    to the group's ``log/train.log`` once it joins, and the console shows basetrainer's lines only
    (:mod:`basetrainer.utils.console`). A restarted group resumes from its last
    checkpoint (``resume: auto`` unless ``resume`` says otherwise) before it takes the live groups' state, so that
    it loses only what it trained since, should none be alive. A job started afresh (``resume`` null) is a new run
    in every group, as a plain run is in a used work_dir: a restarted group resumes only from checkpoints written
    since the job started, never from an earlier job's. A group started after another finished the training (the
    supervisor's file says so) raises :class:`~basetrainer.errors.TrainingAlreadyFinished`, which ends it with 0.

    A group the local supervisor did not start (``group_id`` given: one job per group, as on a cluster) may be on
    another machine than its peers: its gloo goes through the interface that reaches the lighthouse
    (``GLOO_SOCKET_IFNAME``, :mod:`basetrainer.distributed.interfaces`), whose address it announces for its torchft
    store and Manager, not the host name's (127.0.1.1 on Debian and Ubuntu) nor ``localhost``."""
    settings = options.fault_tolerance
    if not settings.enabled:
        return None, options
    group_id, lighthouse, restarts = replica_group_from_environment()
    group_id = settings.group_id if settings.group_id is not None else group_id
    lighthouse = lighthouse or (None if settings.lighthouse == "auto" else settings.lighthouse)
    if group_id is None:
        raise ConfigError("fault_tolerance is set and this process belongs to no replica group: start the job "
                          "through launch() (examples/example.py does), which starts the groups, or set "
                          "fault_tolerance.group_id")
    if lighthouse is None:
        raise ConfigError("fault_tolerance.lighthouse: auto is started by launch() for the whole local job; this "
                          "process runs one group alone: give the lighthouse's address (http://host:port)")
    supervised = replica_group_from_environment()[0] is not None  # its console is the supervisor's
    job_started, finished_marker = replica_job_from_environment()
    log_file = None
    if options.work_dir:
        work_dir = os.path.join(options.work_dir, "replica_groups", str(group_id))
        _set(cfg, "work_dir", work_dir)
        options = dataclasses.replace(options, work_dir=work_dir)
        log_file = os.path.join(work_dir, "log", "train.log") if supervised else None
    if group_id:
        options = dataclasses.replace(options, progress=False)  # group 0's bar is the job's
    files_since = job_started if options.resume is None else None  # an earlier job's checkpoints are not this one's
    if restarts and options.resume is None:
        options = dataclasses.replace(options, resume="auto")
    from .replica_groups import ReplicaGroups  # imports torchft: only when asked
    address = None if supervised else _address_towards(lighthouse_url(lighthouse), group_id)
    groups = ReplicaGroups(settings, group_id, lighthouse_url(lighthouse), device, log_file=log_file,
                           files_since=files_since, finished_marker=finished_marker, address=address)
    groups.stop_if_the_training_finished()  # restarted as the others finished: before anything is built
    return groups, options


def _address_towards(lighthouse: str, group_id: int):
    """This machine's address on the interface gloo takes between the groups (the one reaching the lighthouse, or
    ``GLOO_SOCKET_IFNAME`` as given); None where none is found (torchft's own choice, the host name, stands)."""
    words = choose_gloo_interface(lighthouse, several_machines=True, meeting_point="the lighthouse")
    say("replica group %d: %s", group_id, words)  # the group's start-up line, as launch() writes one across machines
    return address_of(os.environ.get(GLOO_INTERFACE))


def _set(cfg, key: str, value) -> None:
    if isinstance(cfg, dict):
        cfg[key] = value
    else:
        setattr(cfg, key, value)
