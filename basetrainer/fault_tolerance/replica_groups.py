"""This process's replica group among the others: torchft's Manager, the quorum before a step, the commit after it.

A step (or, under DiLoCo, a run of steps up to an outer step: a *commit unit*) goes:

1. **quorum** (:meth:`ReplicaGroups.quorum`, asked for by the batches before the unit's first batch is read): the
   lighthouse names the groups alive; a group behind the others (one that just started) receives the training
   state of a live one here, and the batches are dealt over the groups alive (:mod:`.batches`);
2. the unit's forward and backward, and the gradients averaged over the groups (or, under DiLoCo, the local
   steps and the averaged change: :mod:`.diloco`), with the first group's buffers sent to the others
   (:mod:`.buffers`);
3. **commit** (:meth:`ReplicaGroups.commit`): every group's collectives succeeded, so the optimizer steps, the
   buffers are the first group's and the data the unit read counts as read; otherwise every group drops the step,
   puts its buffers back, says so, and reads that data again.

The training state a group hands a peer is the one a checkpoint holds (the trainer's checkpoint manager), at the
quorum, between two units; torchft sends it over HTTP from the peer's memory, not through the disk.
"""
import contextlib
import datetime
import os
import socket
import time
import warnings

import torch

from ..distributed import comm
from ..distributed.lighthouse import torchft_module
from ..errors import TrainingAlreadyFinished
from ..utils import console
from ..utils.log import get_logger, keep_warnings_on_the_console
from .messages import say
from .batches import check_loader, planned_batches
from .buffers import GroupBuffers
from .diloco import DiLoCo

logger = get_logger()


def import_torchft():
    """torchft with its Manager and process groups, or a one-line error naming the pip command."""
    torchft_module("torchft.manager")
    torchft_module("torchft.process_group")
    warnings.filterwarnings("ignore", message="The given buffer is not writable")  # its state transfer's reader
    return torchft_module("torchft")


class ReplicaGroups:
    """One replica group's view of the job (see the module docstring).

    ``options``: the run's :class:`~.options.FaultTolerance`; ``group_id``: this group's number; ``lighthouse``: the
    lighthouse's address; ``device``: where the gradients live (gloo between groups on the CPU, NCCL on GPUs);
    ``log_file``: where what libraries write to stderr goes from :meth:`join` on, the console kept for basetrainer's
    lines (None: stderr stays as it is); ``files_since``: when the job started afresh, whose files alone a restarted
    group resumes from (None: any); ``finished_marker``: the file the local supervisor makes once a group finished
    the training; ``address``: the address the other groups reach this one at, announced for its store and Manager
    (None: ``localhost`` and the host name, as on one machine). The Manager starts in :meth:`join`, once the trainer
    is built, so that a starting group is not waited for by the others while it builds."""

    def __init__(self, options, group_id: int, lighthouse: str, device: torch.device, log_file=None,
                 files_since=None, finished_marker=None, address=None):
        self.options, self.group_id, self.lighthouse, self.device = options, group_id, lighthouse, device
        self.log_file, self.files_since, self.finished_marker = log_file, files_since, finished_marker
        self.address = address
        self.torchft = import_torchft()
        self.manager = None
        self.epoch, self.samples_committed = 0, 0  # where the committed units left the epoch's order
        self.samples_pending = 0  # samples the steps of the unit under way read (counted at its commit)
        self.steps_pending = 0  # optimizer steps of the unit under way
        self.participants = (0, None)  # (groups alive, this group's place among them) at the last quorum
        self.dropped_steps = 0
        self.diloco = None  # a DiLoCo, under local_sgd mode diloco
        self.buffers = None  # the model's buffers, kept alike across the groups (GroupBuffers)
        self.healed_in = None  # seconds this group's join took when it took a live group's state
        self.healed_from = None  # the number of the group it took it from
        self._quorum_pending = False  # a quorum is made for the unit under way
        self._healed = False  # this group took a peer's state at the last quorum
        self._in_loop = False  # the training loop runs: a heal now would be mid-run
        self._saved_manager = None  # the Manager's step and count of a checkpoint resumed from before it started
        self._store = None

    # ------------------------------------------------------------------ joining
    def join(self, save_state, load_state) -> bool:
        """Starts the Manager and takes part in the first quorum; returns whether this group healed from a peer.

        ``save_state()`` gives the training state a peer behind receives, ``load_state(state)`` takes a peer's. A
        group that finds, before it meets a live group, that another has finished the training (restarted just
        before the others finished) raises :class:`~basetrainer.errors.TrainingAlreadyFinished` at once."""
        def save():
            return {"group": self.group_id, "state": save_state()}

        def load(sent):
            load_state(sent["state"])
            self._healed, self.healed_from = True, sent["group"]

        if self.log_file is not None:
            console.keep_apart(self.log_file)  # torchft's and gloo's words go to the group's log, from now on
            keep_warnings_on_the_console()
        self.stop_if_the_training_finished()
        start = time.perf_counter()
        self.manager = self._make_manager()
        if self._saved_manager is not None:
            self.manager.load_state_dict(self._saved_manager)
        self.manager.register_state_dict_fn("basetrainer", load, save)
        deadline = time.monotonic() + self.options.join_timeout_ms / 1000
        self.quorum()
        while not self._healed and self.participants[0] < self.options.replica_groups and time.monotonic() < deadline:
            self.stop_if_the_training_finished()
            time.sleep(0.1)  # a job (re)starting: the others are starting too; wait for them, to start together
            self._quorum_pending = False
            self.quorum()
        healed, self._healed, self._in_loop = self._healed, False, True
        count, place = self.participants
        self.healed_in = time.perf_counter() - start if healed else None
        if healed:
            say("replica group %d: took the training state of replica group %d (step %d, epoch %d) in %.2f s; "
                "%d group(s) alive", self.group_id, self.healed_from, self.manager.current_step(), self.epoch + 1,
                self.healed_in, count)
        else:
            logger.info("replica group %d: joined at step %d, %d group(s) alive, this one %s", self.group_id,
                        self.manager.current_step(), count, place)
        return healed

    def stop_if_the_training_finished(self) -> None:
        """Raises TrainingAlreadyFinished where the supervisor's file says another group finished the training (its
        first process looks, and tells the others, so that the group's processes stop alike): as the trainer starts,
        and while the group waits for a peer at :meth:`join`."""
        finished = self.finished_marker is not None and os.path.exists(self.finished_marker)
        if comm.broadcast_object(finished):
            keep_warnings_on_the_console()  # a script that set no logger: the line is tagged with the group too
            say("replica group %d: another group finished the training while this one restarted: nothing is left "
                "for it to do, it stops", self.group_id)
            raise TrainingAlreadyFinished(f"replica group {self.group_id}: the training finished while it restarted")

    def _make_manager(self):
        torchft, options = self.torchft, self.options
        timeout = datetime.timedelta(seconds=options.timeout)
        if self.device.type == "cuda":
            process_group = torchft.process_group.ProcessGroupNCCL(timeout=timeout)
        else:
            process_group = torchft.process_group.ProcessGroupGloo(timeout=timeout)
        host, port = self._group_store()
        return torchft.manager.Manager(
            pg=process_group, load_state_dict=None, state_dict=None, min_replica_size=options.min_replicas,
            use_async_quorum=False,  # the quorum decides the batches, so it comes before they are read
            timeout=timeout, quorum_timeout=timeout, connect_timeout=timeout,
            rank=comm.get_rank(), world_size=comm.get_world_size(), store_addr=host, store_port=port,
            lighthouse_addr=self.lighthouse, replica_id=f"group_{self.group_id}",
            hostname=self.address or socket.gethostname(),  # what the other groups call this one's Manager at
            heartbeat_interval=datetime.timedelta(milliseconds=max(10, options.heartbeat_ms // 10)),
            init_sync=False)  # the trainer seeds the weights alike; at step 0 each rank would heal from another group

    def _group_store(self):
        """The TCPStore through which this group's processes find their Manager, and the other groups this group's
        process group (when it leads a quorum): made by the group's first process on a free port, at the address
        the other groups reach (on one machine, ``localhost`` or the group's MASTER_ADDR)."""
        host = port = None
        if comm.get_rank() == 0:
            host = self.address or (os.environ.get("MASTER_ADDR", "localhost") if comm.get_world_size() > 1
                                    else "localhost")
            self._store = torch.distributed.TCPStore(host, 0, is_master=True, wait_for_workers=False)
            port = self._store.port
        return comm.broadcast_object((host, port))

    # ------------------------------------------------------------------ the trainer's parts
    def planned_batches(self, loader) -> int:
        """The training loader's batches per epoch while every group is alive (the groups deal its data, see
        :mod:`basetrainer.fault_tolerance.batches`: it must be one ``build_dataloader`` made)."""
        check_loader(loader)
        return planned_batches(loader, self.options.replica_groups)

    def prepare(self, model, strategy) -> None:
        """Called once the optimizer is built: takes ``model``'s buffers, which every commit makes alike across the
        groups; under DiLoCo, makes the outer optimizer over ``model`` and gives the strategy its outer weights (and
        buffers) for evaluation, checkpoints and export."""
        self.buffers = GroupBuffers(model)
        if self.options.diloco is not None:
            self.diloco = DiLoCo(self.options.diloco, self, model)
            strategy.replica_weights = self.diloco.outer_weights

    def checkpoint_parts(self) -> dict:
        """This group's parts of a checkpoint: the epoch's position and the Manager's step; DiLoCo's outer weights,
        own weights and outer momentum."""
        return {"fault_tolerance": self, **({"diloco": self.diloco} if self.diloco is not None else {})}

    def step_agreed(self, model) -> bool:
        """Before the optimizer steps: whether it may. Averaging gradients, they are averaged over the groups alive,
        the first group's buffers sent to the others, and the step commits or is dropped here; under DiLoCo every
        inner step may (its sync is :meth:`after_step`)."""
        if self.diloco is not None:
            return True
        buffers = self.send_buffers()
        self.average_gradients(model.parameters())
        return self.commit(buffers)

    def after_step(self) -> None:
        """After the optimizer stepped: DiLoCo's sync when due."""
        if self.diloco is not None:
            self.diloco.after_step()

    # ------------------------------------------------------------------ each unit
    def quorum(self):
        """The quorum of the unit under way, made now if the unit has not started: ``(groups alive, this group's
        place)``. A group that has fallen behind the others mid-run (it missed a commit) cannot take their state
        in the middle of the loop: it ends, and its restart heals at :meth:`join`."""
        if self._quorum_pending:
            return self.participants
        self.manager.start_quorum()
        self._quorum_pending = True
        if self._healed and self._in_loop:
            raise RuntimeError(f"replica group {self.group_id} fell behind the others and took their state mid-run; "
                               f"it restarts to rejoin at step {self.manager.current_step()}")
        alive = (self.manager.num_participants(), self.manager.participating_rank())
        if self._in_loop and alive[0] != self.participants[0]:  # at join, the groups are still arriving
            say("replica group %d: %d group(s) alive, was %d (step %d)", self.group_id, alive[0],
                self.participants[0], self.manager.current_step())
        self.participants = alive
        if self.buffers is not None:
            self.buffers.remember()  # what a dropped unit puts back
        return alive

    def read(self, samples: int) -> None:
        """The batches of one step were handed out: ``samples`` over every group alive (counted at the commit)."""
        self.samples_pending += samples
        self.steps_pending += 1

    def send_buffers(self):
        """Starts sending the first group's buffers to the others (see :mod:`.buffers`), for :meth:`commit`."""
        return self.buffers.send(self.manager, first=self.participants[1] == 0) if self.buffers else None

    def commit(self, buffers=None) -> bool:
        """Whether every group alive completed the unit (torchft's ``should_commit``): then its samples count as
        read and the buffers ``buffers`` brought (:meth:`send_buffers`) are taken; if not, the unit is dropped on
        every group, its samples are dealt again and the buffers are put back as they were at its quorum."""
        if buffers is not None:
            buffers[1].wait()  # before should_commit, which then knows whether it failed
        committed = self.manager.should_commit()
        self._quorum_pending = False
        if self.buffers is not None:
            self.buffers.take(buffers, committed)
        if committed:
            self.samples_committed += self.samples_pending
        else:
            self.dropped_steps += 1
            what = "outer step" if self.diloco is not None else "step"
            say("replica group %d: the groups did not commit %s %d (a group failed during it): it is "
                "dropped on every group and its %d samples are read again", self.group_id, what,
                self.manager.current_step() + 1, self.samples_pending)
        self.samples_pending, self.steps_pending = 0, 0
        return committed

    def average_gradients(self, parameters) -> None:
        """Averages the gradients of ``parameters`` over the groups alive, in one flat all-reduce (a parameter
        without a gradient sends zeros, so that every group sends as much)."""
        parameters = [p for p in parameters if p.requires_grad]
        for parameter in parameters:
            if parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
        gradients = [_local(parameter.grad) for parameter in parameters]
        flat = torch._utils._flatten_dense_tensors(gradients)
        self.manager.allreduce(flat).wait()
        for gradient, averaged in zip(gradients, torch._utils._unflatten_dense_tensors(flat, gradients)):
            gradient.copy_(averaged)

    def allreduce(self, flat: torch.Tensor):
        """Averages ``flat`` over the groups alive; returns torchft's work (``.wait()``)."""
        return self.manager.allreduce(flat)

    # ------------------------------------------------------------------ the epoch's position
    def start_epoch(self, epoch: int) -> None:
        """A new epoch's order starts unread. A DiLoCo unit under way goes on into it (its steps count towards the
        sync), but the samples it read of the epoch before are that epoch's: they do not move the new one's position
        (they did, and a sync period longer than an epoch left every later epoch empty), and a dropped unit reads
        again only what it read of this one."""
        if epoch != self.epoch:
            self.epoch, self.samples_committed, self.samples_pending = epoch, 0, 0

    @property
    def position(self) -> int:
        """Samples of the epoch's order read by the steps handed out so far (committed or under way)."""
        return self.samples_committed + self.samples_pending

    # ------------------------------------------------------------------ checkpoint part
    def state_dict(self) -> dict:
        return {"fault_tolerance": {"epoch": self.epoch, "samples": self.samples_committed,
                                    "pending": [self.samples_pending, self.steps_pending],
                                    "manager": self.manager.state_dict() if self.manager is not None else None}}

    def load_state_dict(self, saved: dict, name: str) -> None:
        part = saved.get("fault_tolerance")
        if part is None:
            return  # a checkpoint of a run without replica groups: the epoch's order starts afresh
        self.epoch, self.samples_committed = part["epoch"], part["samples"]
        self.samples_pending, self.steps_pending = part["pending"]  # a DiLoCo sync's steps taken, saved mid-way
        if self.manager is None:
            self._saved_manager = part["manager"]  # for the Manager, at join
        elif part["manager"] is not None:
            self.manager.load_state_dict(part["manager"])

    def shutdown(self) -> None:
        if self.manager is not None:
            self.manager.shutdown(wait=False)
            self.manager = None


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (FSDP inside a group), else the tensor."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


@contextlib.contextmanager
def left_after(groups):
    """A context at whose end this group's Manager stops (nothing without replica groups)."""
    try:
        yield
    finally:
        if groups is not None:
            groups.shutdown()
