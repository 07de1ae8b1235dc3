"""Reading ``torch.distributed.checkpoint`` directories without running code from them.

DCP's ``FileSystemReader`` loads a checkpoint's ``.metadata`` with a plain ``pickle.load``,
and its default load planner reads non-tensor values with ``torch.load(weights_only=False)``:
a hostile checkpoint directory would run code where a ``last.pth`` is refused. Here the
metadata goes through an unpickler that builds only DCP's own metadata classes (and
dtypes, sizes, layouts and paths), and other values through ``weights_only=True``, as
every other checkpoint basetrainer reads.
"""
import io
import pathlib
import pickle

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint import filesystem as dcp_filesystem
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.planner import ReadItem

from ..errors import CheckpointError
from .discovery import METADATA_FILE
from .files import unsafe_detail

_ALLOWED = {
    ("torch.distributed.checkpoint.metadata", name): getattr(dcp_metadata, name)
    for name in ("Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
                 "TensorProperties", "StorageMeta", "MetadataIndex", "_MEM_FORMAT_ENCODING")
}
_ALLOWED.update({
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"): dcp_filesystem._StorageInfo,
    ("torch", "Size"): torch.Size,
    ("torch.serialization", "_get_layout"): torch.serialization._get_layout,
    ("pathlib", "PosixPath"): pathlib.PosixPath,
    ("pathlib", "PurePosixPath"): pathlib.PurePosixPath,
})


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"{module}.{name}")


def read_metadata(directory) -> dcp_metadata.Metadata:
    """The ``.metadata`` of a DCP checkpoint directory, or a one-line CheckpointError (hostile or broken file)."""
    path = pathlib.Path(directory) / METADATA_FILE
    try:
        with open(path, "rb") as stream:
            metadata = _MetadataUnpickler(stream).load()
    except FileNotFoundError:
        raise CheckpointError(f"{directory} is no complete checkpoint (no {METADATA_FILE}); resume from an "
                              f"earlier one") from None
    except pickle.UnpicklingError as e:
        raise CheckpointError(f"refusing to load {directory}: its {METADATA_FILE} would call {e}, which is no part "
                              f"of a checkpoint's metadata; only load checkpoints you trust") from None
    except Exception as e:  # noqa: BLE001 - garbage bytes make the unpickler fail in arbitrary ways
        raise CheckpointError(f"{path} is truncated or not a checkpoint's metadata ({type(e).__name__}); resume "
                              f"from an earlier checkpoint") from None
    if not isinstance(metadata, dcp_metadata.Metadata):
        raise CheckpointError(f"{path} holds a {type(metadata).__name__}, not a checkpoint's metadata")
    return metadata


def load(state: dict, directory, no_dist: bool) -> None:
    """``dcp.load`` of ``state`` from ``directory`` through :class:`SafeFileSystemReader` and
    :class:`SafeLoadPlanner`; any failure is a one-line CheckpointError."""
    try:
        dcp.load(state, storage_reader=SafeFileSystemReader(directory), planner=SafeLoadPlanner(), no_dist=no_dist)
    except CheckpointError:
        raise
    except (Exception, CheckpointException) as e:  # noqa: BLE001 - DCP gathers every rank's failure in its own type
        failures = [failure[0] for failure in getattr(e, "failures", {}).values()] or [e]
        refusal = next((failure for failure in failures if isinstance(failure, CheckpointError)), None)
        if refusal is not None:
            raise CheckpointError(str(refusal)) from None
        detail = str(failures[0]).strip().splitlines()[0] if str(failures[0]).strip() else type(failures[0]).__name__
        raise CheckpointError(f"{directory} does not fit what it is loaded into ({detail}); resume with the same "
                              f"model and optimizer, or use finetune") from None


class SafeFileSystemReader(FileSystemReader):
    """``FileSystemReader`` whose metadata is read by :func:`read_metadata`."""

    def read_metadata(self, *args, **kwargs) -> dcp_metadata.Metadata:
        if kwargs.get("rank") is not None:
            raise CheckpointError("per-rank DCP metadata files are not supported; save with a process group")
        metadata = read_metadata(self.path)
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = dcp_metadata.StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class SafeLoadPlanner(DefaultLoadPlanner):
    """``DefaultLoadPlanner`` that reads non-tensor values (optimizer hyper-parameters) with ``weights_only=True``."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        try:
            loaded = torch.load(value, weights_only=True)
        except pickle.UnpicklingError as e:
            raise CheckpointError(f"refusing to load {read_item.dest_index.fqn} from the checkpoint: it needs "
                                  f"arbitrary code to unpickle ({unsafe_detail(e)})") from None
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)
        else:
            self.state_dict[read_item.dest_index.fqn] = loaded
