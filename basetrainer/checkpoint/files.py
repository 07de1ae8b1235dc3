"""Checkpoint files: atomic writes, checksums, and loads that never run code.

A checkpoint holds only tensors, numbers, strings, lists and dicts, so that
``torch.load(..., weights_only=True)`` reads it and a file that would need arbitrary
unpickling is refused.

The training state (``last.pth``) is saved with ``keep_previous``: the file it replaces
becomes ``last.prev.pth``, and each has its SHA-256 beside it (``last.pth.sha256``), so
that a damaged file is told from a good one and the previous one is still there to
resume from. Whatever kills a save at whatever moment, the files there are complete and
each matches its checksum or has none yet (which a load accepts), and at least one of the
two is there.
"""
import errno
import hashlib
import os
import pickle
import shutil

import torch

from ..errors import CheckpointError
from ..utils.file_utils import atomic_write, file_size_text, write_text_atomic

CHECKSUM_SUFFIX = ".sha256"


def save_checkpoint(obj, path: str, keep_previous: bool = False) -> str:
    """Writes ``obj`` to ``path`` atomically and durably: a crash mid-write leaves any previous file intact.

    ``keep_previous``: the file ``path`` replaces is kept as :func:`previous_path`, and both
    get their checksum beside them (:func:`checksum_path`).
    """
    digest = hashlib.sha256()
    hashing = None
    try:
        with atomic_write(path, binary=True, durable=True) as stream:
            hashing = _Hashing(stream, digest)
            torch.save(obj, hashing)
            if keep_previous:  # the new file is complete: only now may the current one step aside
                _step_aside(path)
        if keep_previous:
            write_text_atomic(checksum_path(path), digest.hexdigest() + "\n")
    except OSError as e:
        raise CheckpointError(_write_failure(path, obj, e, keep_previous)) from None
    except RuntimeError:
        # torch's zip writer turns the stream's OSError (a full disk) into "unexpected pos ..."; the stream kept it
        if hashing is None or hashing.error is None:
            raise
        raise CheckpointError(_write_failure(path, obj, hashing.error, keep_previous)) from None
    return path


def previous_path(path: str) -> str:
    """Where the checkpoint before ``path`` is kept: ``model/last.pth`` -> ``model/last.prev.pth``."""
    root, extension = os.path.splitext(str(path))
    return f"{root}.prev{extension}"


def checksum_path(path: str) -> str:
    return f"{path}{CHECKSUM_SUFFIX}"


def verify_checksum(path: str) -> None:
    """Raises a CheckpointError when ``path`` does not match the checksum saved beside it
    (bit rot, a copy cut short); a file without one (older runs, other tools) passes."""
    try:
        with open(checksum_path(path), encoding="utf-8") as stream:
            expected = stream.read().split()[0]
    except (OSError, IndexError):
        return
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 24), b""):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise CheckpointError(f"{path} does not match its checksum ({checksum_path(path)}): it was damaged after "
                              f"it was written (a bad disk, a copy cut short); resume from an earlier checkpoint")


def load_checkpoint(path: str, map_location="cpu") -> dict:
    """Reads a checkpoint or state_dict file with ``weights_only=True``, or raises a one-line CheckpointError
    (also when the file does not match the checksum saved beside it)."""
    if not os.path.isfile(path):
        raise CheckpointError(f"no checkpoint at {path}: check the path (or use resume: auto)")
    verify_checksum(path)
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "weights only" in str(e).lower() or "weights_only" in str(e).lower():
            raise CheckpointError(
                f"refusing to load {path}: it needs arbitrary code to unpickle ({unsafe_detail(e)}); "
                f"only load files you trust, with torch.load(weights_only=False) yourself"
            ) from None
        raise CheckpointError(f"{path} is not a readable checkpoint ({first}); use another file") from None
    except Exception as e:  # noqa: BLE001 - garbage bytes make the unpickler fail in arbitrary ways
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(
            f"{path} is truncated or not a checkpoint ({detail}); resume from an earlier checkpoint"
        ) from None


class _Hashing:
    """A binary stream that hashes what is written through it (torch.save writes sequentially)."""

    def __init__(self, stream, digest):
        self.stream, self.digest = stream, digest
        self.error = None  # the OSError a write raised, which torch.save reports as a RuntimeError of its own

    def write(self, data):
        self.digest.update(data)
        try:
            return self.stream.write(data)
        except OSError as error:
            self.error = error
            raise

    def flush(self):
        self.stream.flush()


def _step_aside(path: str) -> None:
    """``path`` (and its checksum) become the previous checkpoint. The previous one's checksum goes
    first and the file moves before its checksum, so that a kill between two steps leaves every
    file there complete and either matching its checksum or without one (which a load accepts)."""
    if not os.path.isfile(path):
        return
    previous = previous_path(path)
    if os.path.exists(checksum_path(previous)):
        os.remove(checksum_path(previous))
    os.replace(path, previous)
    if os.path.exists(checksum_path(path)):
        os.replace(checksum_path(path), checksum_path(previous))


def _write_failure(path, obj, error: OSError, keep_previous: bool) -> str:
    """The one-line message of a failed save: the path, what it needs, what is free, what is intact."""
    intact = previous_path(path) if keep_previous and not os.path.isfile(path) else path
    kept = f"the previous checkpoint {intact} is intact" if os.path.isfile(intact) else "there was none before"
    if error.errno != errno.ENOSPC:
        return (f"could not write checkpoint {path}: {error.strerror or error}; check the folder's permissions "
                f"and space ({kept})")
    try:
        free = f", {file_size_text(shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free)} free"
    except OSError:
        free = ""
    return (f"could not write checkpoint {path}: No space left on device (it needs about "
            f"{file_size_text(_payload_bytes(obj))}{free}); free some disk space or choose another work_dir ({kept})")


def _payload_bytes(obj) -> int:
    """The bytes of the tensors in ``obj`` (each storage once): about what the file takes."""
    seen, total, pending = set(), 0, [obj]
    while pending:
        item = pending.pop()
        if isinstance(item, torch.Tensor):
            storage = item.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
        elif isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
    return total


def unsafe_detail(error: Exception) -> str:
    for line in str(error).splitlines():
        if "Unsupported global" in line or "GLOBAL" in line:
            return line.strip().rstrip(".")
    return "unsupported object"
