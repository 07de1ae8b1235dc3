"""Replica groups as processes: the local job's supervisor, which runs the command once per group and restarts a group
that dies.

Given a config whose ``fault_tolerance.replica_groups`` is N >= 1 and whose ``group_id`` is null,
:func:`~basetrainer.distributed.launch.launch` does not train in the command's process: that process supervises
(:func:`supervise`). It serves the lighthouse (``lighthouse: auto``, on a free port:
:mod:`basetrainer.distributed.lighthouse`) or takes the address given, then runs the same command again (``python
script.py ...``, ``python -m module ...``, ``basetrainer train ...``: :func:`rerun_command`) once per group, with
the environment plus

- ``BASETRAINER_REPLICA_GROUP``: the group's number, 0 to N-1;
- ``BASETRAINER_LIGHTHOUSE``: the lighthouse's address, ``http://host:port``;
- ``BASETRAINER_REPLICA_GROUP_RESTARTS``: how many times the group was restarted;
- ``BASETRAINER_REPLICA_JOB_STARTED``: when the supervisor started (seconds since the epoch): a group of a job started
  afresh (``resume`` null) in a used work_dir resumes, when restarted, only from checkpoints written since, never from
  an earlier job's;
- ``BASETRAINER_REPLICA_JOB_FINISHED``: a file that exists once a group has finished the training: a group restarted
  just before the others finished, which finds no live group to take the state from, exits at once (with 0).

In a group's process launch() runs as without fault tolerance: the group is that one process, or the workers it
spawns, which meet at a rendezvous store of their own on a free port (so that groups on one machine never collide).
The code that trains in a group (:mod:`basetrainer.fault_tolerance`) reads them with
:func:`replica_group_from_environment` and :func:`replica_job_from_environment`. Every process of a group (its command,
the workers it spawns, theirs) carries ``BASETRAINER_REPLICA_GROUP`` in its environment: that finds them, to kill a
group by hand.

A group whose command dies (killed by a signal, or exited non-zero with a code that is not a user error's:
:func:`is_restarted`; a group of several processes exits 1 when one of them is killed) is started again, at most
``max_restarts`` times, and takes the training state from a live group; each death and restart is one line of the
log. A group that ends with a user error, or saved and stopped (exit 75), is not restarted; one that used up its
restarts is left out, and the others go on with fewer groups, as the quorum (``min_replicas``) allows. A stop
signal (SIGTERM, SIGINT, SIGUSR1) is passed on to every group, and nothing is restarted after it; nor after a group
has ended with 0 (it finished the training: a group restarted then would train again alone), and a group that dies
then is no failure of the job. A group restarted just before another finished, which finds no live group at its
first quorum, sees the supervisor's file (``BASETRAINER_REPLICA_JOB_FINISHED``) and exits at once; one still running
``join_timeout_ms`` + 10 s after another finished is stopped. The supervisor returns when every group has ended:
normally when each ended with 0, with :class:`~basetrainer.errors.TrainingInterrupted` (exit 75) when the others
saved and stopped, otherwise with a one-line LaunchError naming each group that failed and how. The lighthouse is
shut down at the end, whatever happens.
The supervisor imports torchft only to serve the lighthouse, and never starts CUDA.

On a cluster the scheduler starts the groups, one job per group (a torchrun or a SLURM job each): run the
lighthouse on a machine every group reaches (``torchft_lighthouse --min_replicas 1 --join_timeout_ms 30000
--heartbeat_timeout_ms 1000 --bind [::]:29510``), then start each group with ``fault_tolerance.group_id`` set to its
number and ``lighthouse: http://<that machine>:29510``; the scheduler restarts a group that dies (torchrun's
``--max-restarts``, a SLURM requeue).
"""
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from typing import Optional, Tuple

from ..errors import BaseTrainerError, LaunchError, NonFiniteLossError, TrainingInterrupted
from ..utils.log import REPLICA_GROUP_VARIABLE, get_logger
from . import signals
from .children import die_with_parent, how_it_ended
from .lighthouse import serving_lighthouse
from .process_group import started_by_slurm, started_by_torchrun, started_in_a_group

logger = get_logger()

GROUP_VARIABLE = REPLICA_GROUP_VARIABLE  # "BASETRAINER_REPLICA_GROUP": the log tags a group's lines with it
LIGHTHOUSE_VARIABLE = "BASETRAINER_LIGHTHOUSE"
RESTARTS_VARIABLE = "BASETRAINER_REPLICA_GROUP_RESTARTS"
JOB_STARTED_VARIABLE = "BASETRAINER_REPLICA_JOB_STARTED"
JOB_FINISHED_VARIABLE = "BASETRAINER_REPLICA_JOB_FINISHED"
# What the supervisor reads, where a config made by hand leaves it out: the defaults engine/settings.py declares.
DEFAULT_SETTINGS = {"replica_groups": 0, "group_id": None, "lighthouse": "auto", "min_replicas": 1,
                    "heartbeat_ms": 1000, "join_timeout_ms": 30000, "max_restarts": 3}
# A group's command that ends with one of these would end the same way again: every user-facing error's (a config,
# the data, a checkpoint, the processes asked for), a NaN loss's, and a stop signal's once the group saved (it stopped
# as asked). The watchdog's 124 is restarted: its error says that a restart takes over.
NOT_RESTARTED = frozenset({BaseTrainerError.exit_code, NonFiniteLossError.exit_code, TrainingInterrupted.exit_code})
FORWARDED_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGUSR1") if hasattr(signal, name))
_POLL_SECONDS = 0.1
_KILL_GRACE_SECONDS = 30.0  # for a group to save and stop, when the supervisor itself fails


def replica_group_from_environment() -> Tuple[Optional[int], Optional[str], int]:
    """``(group, lighthouse, restarts)`` as the supervisor set them for this process: its replica group's number and
    the lighthouse's address (None where unset: a process no supervisor started), and how many times the group was
    restarted (0 where unset)."""
    group, restarts = _environment_integer(GROUP_VARIABLE), _environment_integer(RESTARTS_VARIABLE)
    return group, os.environ.get(LIGHTHOUSE_VARIABLE) or None, restarts or 0


def replica_job_from_environment() -> Tuple[Optional[float], Optional[str]]:
    """``(started, finished marker)`` of the job the supervisor runs this process in: when it started (seconds since
    the epoch) and the file that exists once a group finished the training; ``(None, None)`` in a process no supervisor
    started."""
    started = os.environ.get(JOB_STARTED_VARIABLE, "")
    try:
        started = float(started) if started else None
    except ValueError:
        raise LaunchError(f"the environment variable {JOB_STARTED_VARIABLE}={started!r} is not a time: unset it, or "
                          f"start the replica groups through launch()") from None
    return started, os.environ.get(JOB_FINISHED_VARIABLE) or None


def _environment_integer(name: str) -> Optional[int]:
    value = os.environ.get(name, "")
    if not value:
        return None
    if not value.isdigit():
        raise LaunchError(f"the environment variable {name}={value!r} is not a whole number: unset it, or start the "
                          f"replica groups through launch()")
    return int(value)


def settings_to_supervise(args, num_machines: int) -> Optional[dict]:
    """The ``fault_tolerance`` settings (defaults filled in) when this process must supervise replica groups: the
    first of ``args`` that is a mapping with a ``fault_tolerance`` mapping (a config) has ``replica_groups`` >= 1 and
    ``group_id`` null there, and no supervisor started this process. None otherwise. A job that cannot start its
    groups from here (torchrun's or SLURM's processes, several machines) is a one-line LaunchError."""
    given = next((arg["fault_tolerance"] for arg in args
                  if isinstance(arg, Mapping) and isinstance(arg.get("fault_tolerance"), Mapping)), {})
    settings = {**DEFAULT_SETTINGS, **given}
    if not settings["replica_groups"] or settings["group_id"] is not None or GROUP_VARIABLE in os.environ:
        return None
    started_by = ("torchrun" if started_by_torchrun() else "SLURM" if started_by_slurm()
                  else "a driver that made the process group" if started_in_a_group()
                  else f"launch() on {num_machines} machines" if num_machines > 1 else None)
    if started_by:
        raise LaunchError(f"fault_tolerance.group_id is null in processes started by {started_by}: launch() starts "
                          f"every replica group on this machine only; start one job per group with "
                          f"fault_tolerance.group_id set and lighthouse: http://host:port, or run the job on one "
                          f"machine without a launcher")
    return settings


def supervise(settings: Mapping) -> None:
    """Runs this process's command once per replica group until every group has ended; see the module docstring."""
    command = rerun_command()
    with serving_lighthouse(settings) as lighthouse:
        supervisor = Supervisor(command, int(settings["replica_groups"]), lighthouse, int(settings["max_restarts"]),
                                straggler_seconds=int(settings["join_timeout_ms"]) / 1000 + 10)
        supervisor.run()
    supervisor.check_outcome()


def rerun_command() -> list:
    """The command that started this process, to run again: ``python script.py ARGS`` (an installed command such as
    ``basetrainer`` is a script too) or ``python -m module ARGS`` (the module again, not its file). A Python started
    without either (``python -c``, an interactive session) is a one-line LaunchError."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name != "__main__":
        return [sys.executable, "-m", spec.name, *sys.argv[1:]]
    if not sys.executable or not sys.argv or not os.path.exists(sys.argv[0]):
        raise LaunchError("fault_tolerance.replica_groups: launch() starts each replica group by running this "
                          "command again, and it is no script (python -c, an interactive session?): run a script or "
                          "python -m module, or start each group yourself with fault_tolerance.group_id")
    return [sys.executable, *sys.argv]


def is_restarted(exit_code: int) -> bool:
    """Whether a group's command that ended with ``exit_code`` (negative: killed by that signal) is started again:
    after a death by a signal or a failure, yes; after success, a user error or a stop (``NOT_RESTARTED``), no."""
    return exit_code != 0 and exit_code not in NOT_RESTARTED


class ReplicaGroup:
    """One group: its number, the process of its latest start, and how many times it was restarted."""

    def __init__(self, number: int):
        self.number, self.process, self.restarts = number, None, 0

    def start(self, command, job_environment: dict) -> None:
        """Starts ``command`` as this group (with the job's variables, ``job_environment``, and its own), in a process
        group of its own (a terminal's Ctrl-C reaches the supervisor only, which passes it on once) that dies with the
        supervisor. A stop signal waits while the process starts, so that the supervisor passes it on once the process
        is known."""
        env = dict(os.environ, **job_environment, **{GROUP_VARIABLE: str(self.number),
                                                     RESTARTS_VARIABLE: str(self.restarts)})
        held = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED_SIGNALS)
        try:
            self.process = subprocess.Popen(command, env=env, preexec_fn=lambda: _in_group_process(held))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def ended(self) -> bool:
        return self.process.poll() is not None

    def how_it_ended(self) -> str:
        """``exited with code 1`` or ``was killed by SIGKILL``."""
        return how_it_ended(self.process.returncode)


class Supervisor:
    """Runs ``command`` once per replica group and restarts the groups that die; see the module docstring."""

    def __init__(self, command, groups: int, lighthouse: str, max_restarts: int, straggler_seconds: float = 40.0):
        self.command, self.lighthouse, self.max_restarts = command, lighthouse, max_restarts
        self.straggler_seconds = straggler_seconds  # how long a group may run on once another finished
        self._finished_at = None
        self.groups = [ReplicaGroup(number) for number in range(groups)]
        self.stop_signal = None  # the first stop signal received: nothing is started after it
        self.finished = False  # a group ended with 0: training is done, and nothing is started after it
        self.ended_after_finish = set()  # groups that died once another had finished the training (not failures)
        self.started = time.time()
        self.finished_marker = None  # the file made when a group finishes, during run()

    def run(self) -> None:
        """Starts every group and returns when all have ended."""
        with self._passing_on_stop_signals(), tempfile.TemporaryDirectory(prefix="basetrainer-replica-job-") as job:
            self.finished_marker = os.path.join(job, "finished")
            try:
                running = list(self.groups)
                for group in running:
                    self._start(group)
                while running:
                    time.sleep(_POLL_SECONDS)
                    for group in [group for group in running if group.ended()]:
                        if not self._restarted(group):
                            running.remove(group)
                    self._stop_stragglers(running)
            finally:
                self._stop_the_live_groups()

    def check_outcome(self) -> None:
        """Returns when every group ended with 0; otherwise raises, naming the groups that did not."""
        failed = [group for group in self.groups
                  if group.process.returncode != 0 and group.number not in self.ended_after_finish]
        if not failed:
            return
        numbers = ", ".join(str(group.number) for group in failed)
        if all(group.process.returncode == TrainingInterrupted.exit_code for group in failed):
            by = f" on {self.stop_signal.name}" if self.stop_signal else ""
            raise TrainingInterrupted(f"replica group(s) {numbers} saved and stopped{by}; rerun with resume: auto to "
                                      f"continue")
        ends = "; ".join(f"group {group.number} {group.how_it_ended()}{self._why_it_ended_there(group)}"
                         for group in failed)
        raise LaunchError(f"replica group(s) {numbers} failed: {ends} (each group's own error is above)")

    def _start(self, group: ReplicaGroup) -> None:
        stopped = self.stop_signal  # passed on to the groups alive then: this one gets it now
        group.start(self.command, {LIGHTHOUSE_VARIABLE: self.lighthouse, JOB_STARTED_VARIABLE: repr(self.started),
                                   JOB_FINISHED_VARIABLE: self.finished_marker or ""})
        if stopped is not None:
            group.process.send_signal(stopped)

    def _restarted(self, group: ReplicaGroup) -> bool:
        """Starts an ended ``group`` again if it may be; logs how it ended and what follows."""
        code, how = group.process.returncode, group.how_it_ended()
        if code == 0:
            logger.info("replica group %d finished", group.number)
            self.finished, self._finished_at = True, self._finished_at or time.monotonic()
            if self.finished_marker is not None and not os.path.exists(self.finished_marker):
                open(self.finished_marker, "w").close()  # a group restarted meanwhile then exits at once
            return False
        if self.finished and is_restarted(code):  # it would start again alone, the training already done
            logger.warning("replica group %d %s after another group finished the training: not restarted",
                           group.number, how)
            self.ended_after_finish.add(group.number)
            return False
        if self.stop_signal is None and is_restarted(code) and group.restarts < self.max_restarts:
            group.restarts += 1
            logger.warning("replica group %d %s: restart %d of %d", group.number, how, group.restarts,
                           self.max_restarts)
            self._start(group)
            return True
        ending = ": the other groups go on without it" if self.stop_signal is None and is_restarted(code) else ""
        logger.warning("replica group %d %s%s%s", group.number, how, self._why_it_ended_there(group), ending)
        return False

    def _stop_stragglers(self, running) -> None:
        """A group still running ``straggler_seconds`` after another finished the training is one restarted too late
        to find a live group (it would train the rest again alone): it is stopped (SIGTERM: it saves and stops), and
        its end is no failure of the job."""
        if self._finished_at is None or time.monotonic() < self._finished_at + self.straggler_seconds:
            return
        for group in running:
            if group.number not in self.ended_after_finish:
                logger.warning("replica group %d still runs %.0f s after the training finished: stopped",
                               group.number, self.straggler_seconds)
                self.ended_after_finish.add(group.number)
                group.process.terminate()

    def _why_it_ended_there(self, group: ReplicaGroup) -> str:
        """Why a group that failed was not restarted, as the end of a line."""
        code = group.process.returncode
        if self.stop_signal is not None:
            return f" after {self.stop_signal.name}"
        if code == TrainingInterrupted.exit_code:
            return " (saved and stopped: not restarted)"
        if not is_restarted(code):
            return " (a user error: not restarted)"
        return f" after {group.restarts} restart(s), the most allowed (max_restarts)"

    def _passing_on_stop_signals(self):
        """While inside, a stop signal sent to this process is passed on to every live group (Python lets only the
        main thread handle signals: elsewhere none is handled)."""
        def pass_on(signum, frame):
            self.stop_signal = self.stop_signal or signal.Signals(signum)
            for group in self.groups:
                if group.process is not None and not group.ended():
                    group.process.send_signal(signum)

        return signals.handling(pass_on, FORWARDED_SIGNALS)

    def _stop_the_live_groups(self) -> None:
        """Stops the groups still running when the supervisor itself fails: SIGTERM (they save and stop), then
        SIGKILL after a grace."""
        live = [group for group in self.groups if group.process is not None and not group.ended()]
        for group in live:
            group.process.terminate()
        deadline = time.monotonic() + _KILL_GRACE_SECONDS
        for group in live:
            try:
                group.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                group.process.kill()
                group.process.wait()


def _in_group_process(signal_mask) -> None:
    """In a group's process before its command starts: a process group of its own, death with the supervisor (a
    supervisor killed outright must not leave its groups training), and the supervisor's ``signal_mask`` from
    before it held the stop signals back."""
    os.setpgid(0, 0)
    die_with_parent()
    signal.pthread_sigmask(signal.SIG_SETMASK, signal_mask)
