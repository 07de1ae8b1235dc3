"""Sharded checkpoints: every rank writes its own shards with ``torch.distributed.checkpoint`` (DCP).

Used under ``strategy: fsdp`` and with ``async_checkpoint: true`` (the trainer tells the checkpoint manager).
Where ``last.pth`` would be written, ``last/`` is::

    model/last -> .last.<step>-<id>/     a link, swapped atomically once the save is complete
    model/.last.<step>-<id>/.metadata    DCP's index (written last), then one file per rank:
                            __0_0.distcp, __1_0.distcp, ...

It holds ``model`` (:func:`torch.distributed.checkpoint.state_dict.get_model_state_dict`: each
rank's shards under FSDP, keys free of ``module.``, ``_orig_mod.`` and
``_checkpoint_wrapped_module.``; under a pipeline each process's stages), ``optimizer`` (likewise, flattened:
keyed by parameter name; the nested form of earlier checkpoints still loads),
``loop`` (rank 0's training state less the weights, as in ``last.pth``: counters, callbacks,
scaler, every rank's RNG states, config; serialized and read back with ``weights_only=True``)
and ``rank<r>`` (what differs per rank and would otherwise collapse to one rank's copy: the
interrupted epoch's loss sums and samples seen). DCP reshards on load, so a checkpoint of
2 processes resumes on 1 or 4, and one process with no process group reads it too.

A kill at any moment leaves ``last`` pointing to a complete save: the new version is written
beside it and the link replaced only after DCP wrote its ``.metadata``; older versions are
removed after the swap. With ``async_checkpoint`` the save is staged to host memory and
written by a background thread over its own gloo group while training goes on; a second
save, and the end of the run, first wait for it.
"""
import glob
import io
import os
import pickle
import shutil
import uuid
from concurrent.futures import Future

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from ..distributed import comm
from ..errors import CheckpointError
from ..parallel.fsdp import reshard
from ..utils.log import get_logger
from . import safe_dcp
from .discovery import checkpoint_directory
from .files import unsafe_detail
from .safe_dcp import read_metadata

logger = get_logger()

_PER_RANK = ("loss_tally", "samples_seen")
# The optimizer state keyed by parameter name, settings included ("optimizer.param_groups.<name>.lr"): the processes of
# a pipeline hold different parameters, and the nested form's one list of names per group would collide between them.
FLAT = StateDictOptions(flatten_optimizer_state_dict=True)
NESTED_OPTIMIZER_KEY = "optimizer.param_groups.0.params"  # only in the nested form (checkpoints of earlier versions)


class ShardedCheckpointer:
    """Saves and loads one trainer's sharded checkpoints (``asynchronous``: in the background)."""

    def __init__(self, asynchronous: bool = False):
        self.asynchronous = asynchronous
        self._pending = None  # a Future, set once the background save is written and published
        self._group = None

    def save(self, model, optimizer, path, loop_state: dict, trainable_only: bool = False) -> str:
        """Writes a checkpoint to ``checkpoint_directory(path)``; every rank calls it with its own
        ``loop_state`` (rank 0's is kept, and each rank's own loss sums). Returns the directory.
        ``trainable_only``: the parameters that do not train are left out (a LoRA run's base model)."""
        self.wait()  # a second save waits for the first
        directory = checkpoint_directory(path)
        token = comm.broadcast_object(uuid.uuid4().hex[:8])  # the same name on every rank
        version = os.path.join(os.path.dirname(directory), _version_name(directory, loop_state["iteration"], token))
        reshard(model)  # what an evaluation's forward left gathered
        state = {"model": get_model_state_dict(model, options=StateDictOptions(ignore_frozen_params=trainable_only)),
                 "optimizer": get_optimizer_state_dict(model, optimizer, options=FLAT),
                 f"rank{comm.get_rank()}": _encode({key: loop_state.get(key) for key in _PER_RANK})}
        if comm.is_main_process():
            state["loop"] = _encode(loop_state)
        if self.asynchronous and comm.is_distributed():
            written = dcp.async_save(state, checkpoint_id=version, process_group=self._gloo_group())
            self._pending = _then(written, lambda: publish(version, directory) if comm.is_main_process() else None)
            return directory
        dcp.save(state, checkpoint_id=version, no_dist=not comm.is_distributed())
        if comm.is_main_process():
            publish(version, directory)
        comm.synchronize()
        return directory

    def wait(self, quietly: bool = False) -> None:
        """Returns once the background save (if any) is written and published; raises its error,
        or with ``quietly`` (training already failed) logs it."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            pending.result()
        except Exception:
            if not quietly:
                raise
            logger.exception("the checkpoint saved in the background failed too")

    def load(self, model, optimizer, directory, trainable_only: bool = False) -> dict:
        """Loads the model and optimizer of ``directory`` into ``model``'s shards and ``optimizer``;
        returns the rest of the training state (a ``loop_state``, this rank's own values when
        the checkpoint was written by as many processes). ``trainable_only``: as :meth:`save` wrote it."""
        metadata = read_metadata(directory)
        saved_ranks = sum(key.startswith("rank") and key[4:].isdigit() for key in metadata.state_dict_metadata)
        own = f"rank{comm.get_rank()}"
        reshard(model)  # the shards are what is loaded into
        options = FLAT if NESTED_OPTIMIZER_KEY not in metadata.state_dict_metadata else StateDictOptions()
        weights = StateDictOptions(ignore_frozen_params=trainable_only, strict=not trainable_only)
        state = {"model": get_model_state_dict(model, options=weights),
                 "optimizer": get_optimizer_state_dict(model, optimizer, options=options),
                 "loop": _buffer(metadata, "loop", directory)}
        if saved_ranks == comm.get_world_size():
            state[own] = _buffer(metadata, own, directory)
        safe_dcp.load(state, directory, no_dist=not comm.is_distributed())
        set_model_state_dict(model, state["model"], options=weights)
        set_optimizer_state_dict(model, optimizer, state["optimizer"], options=options)
        saved = _decode(state["loop"], directory)
        if own in state:
            saved.update(_decode(state[own], directory))
        return saved

    def _gloo_group(self):
        # Background saves run collectives while training runs its own: on a group of their own.
        if self._group is None:
            self._group = dist.new_group(backend="gloo")
        return self._group


def consolidated_weights(directory) -> dict:
    """The full model weights of a sharded checkpoint, on the CPU, read in this process alone
    (no process group): what ``basetrainer export <checkpoint> --out weights.pth`` writes."""
    metadata = read_metadata(directory)
    state = {key: torch.empty(entry.size, dtype=entry.properties.dtype)
             for key, entry in metadata.state_dict_metadata.items()
             if key.startswith("model.") and hasattr(entry, "properties")}
    safe_dcp.load(state, directory, no_dist=True)
    return {key[len("model."):]: value for key, value in state.items()}


def read_loop_state(directory) -> dict:
    """The training state of a sharded checkpoint less the weights (config, callbacks, counters)."""
    metadata = read_metadata(directory)
    state = {"loop": _buffer(metadata, "loop", directory)}
    safe_dcp.load(state, directory, no_dist=True)
    return _decode(state["loop"], directory)


def publish(version: str, directory: str) -> None:
    """Points ``directory`` (a link) at the complete save ``version`` in one atomic rename, then
    removes the versions it no longer points to (older saves, saves a kill cut short)."""
    parent, name = os.path.split(directory)
    if os.path.isdir(directory) and not os.path.islink(directory):  # a copied checkpoint: keep it as a version
        os.replace(directory, os.path.join(parent, _version_name(directory, "copied", uuid.uuid4().hex[:8])))
    link = os.path.join(parent, f".{name}.link")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(os.path.basename(version), link)
    os.replace(link, directory)
    _fsync_directory(parent)
    for stale in glob.glob(os.path.join(glob.escape(parent), f".{name}.*")):
        if os.path.isdir(stale) and not os.path.islink(stale) and os.path.basename(stale) != os.path.basename(version):
            shutil.rmtree(stale, ignore_errors=True)


def _version_name(directory: str, step, token: str) -> str:
    return f".{os.path.basename(directory)}.{step}-{token}"


def _then(written: Future, publish_step) -> Future:
    """A Future set once ``written`` succeeded and ``publish_step()`` ran (``written``'s own
    callbacks may still be running when its ``result()`` returns)."""
    done = Future()

    def finish(future):
        try:
            future.result()
            publish_step()
            done.set_result(None)
        except BaseException as error:  # noqa: B902 - handed to whoever waits
            done.set_exception(error)

    written.add_done_callback(finish)
    return done


def _encode(obj) -> torch.Tensor:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def _decode(tensor: torch.Tensor, directory) -> dict:
    try:
        return torch.load(io.BytesIO(tensor.numpy().tobytes()), weights_only=True)
    except pickle.UnpicklingError as e:
        raise CheckpointError(f"refusing to load {directory}: its training state needs arbitrary code to unpickle "
                              f"({unsafe_detail(e)})") from None


def _buffer(metadata, key: str, directory) -> torch.Tensor:
    entry = metadata.state_dict_metadata.get(key)
    if entry is None or not hasattr(entry, "size"):
        raise CheckpointError(f"{directory} is not a basetrainer training checkpoint (no '{key}'); use finetune "
                              f"or export to load its weights")
    return torch.empty(entry.size, dtype=torch.uint8)


def _fsync_directory(path: str) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


