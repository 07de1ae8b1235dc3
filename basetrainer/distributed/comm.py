"""Process-group helpers that also work, as no-ops, in a single process.

Every function here is safe to call whether or not ``torch.distributed`` is initialised,
so user code and callbacks need no ``if distributed`` branches.
"""
import os

import torch
import torch.distributed as dist

from ..errors import ConfigError, LaunchError
from ..utils.log import get_logger

_LOCAL_RANK = None
_DATA_PARALLEL = None  # (rank, size, group) where a device mesh makes the data-parallel group smaller than the world


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def get_world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def get_rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def set_local_rank(local_rank: int) -> None:
    """Record this process's place on its machine (``launch`` calls this)."""
    global _LOCAL_RANK
    _LOCAL_RANK = local_rank


def get_local_rank() -> int:
    if _LOCAL_RANK is not None:
        return _LOCAL_RANK
    return int(os.environ.get("LOCAL_RANK", 0)) if is_distributed() else 0


def set_data_parallel(rank: int, size: int, group) -> None:
    """Records the processes that see different data (a device mesh's data-parallel dimensions, see
    :mod:`basetrainer.parallel.mesh`): ``rank`` and ``size`` within them, and their process group. Processes of one
    tensor-parallel group see the same batches, so loaders shard and metrics sum over this group only.
    ``set_data_parallel(None, None, None)``: every process is its own data-parallel rank (the default)."""
    global _DATA_PARALLEL
    _DATA_PARALLEL = None if group is None else (rank, size, group)


def get_data_parallel_rank() -> int:
    """This process's place among the processes that see different data (its global rank without a mesh)."""
    return _DATA_PARALLEL[0] if _DATA_PARALLEL and is_distributed() else get_rank()


def get_data_parallel_world_size() -> int:
    """How many processes see different data: the world size, or a mesh's data-parallel size."""
    return _DATA_PARALLEL[1] if _DATA_PARALLEL and is_distributed() else get_world_size()


def _data_group():
    return _DATA_PARALLEL[2] if _DATA_PARALLEL and is_distributed() else None


def is_main_process() -> bool:
    return get_rank() == 0


def synchronize() -> None:
    """Barrier across all processes; returns at once in a single process."""
    if get_world_size() > 1:
        if dist.get_backend() == dist.Backend.NCCL:
            dist.barrier(device_ids=[torch.cuda.current_device()])
        else:
            dist.barrier()


def all_gather(obj, data_parallel: bool = False):
    """Gathers a picklable object from every rank; returns the list, in rank order. ``data_parallel``: from the
    data-parallel group only (one copy per different shard of the data, see :func:`set_data_parallel`)."""
    group = _data_group() if data_parallel else None
    size = get_data_parallel_world_size() if data_parallel else get_world_size()
    if size == 1:
        return [obj]
    output = [None] * size
    dist.all_gather_object(output, obj, group=group)
    return output


def gather_to_main(obj):
    """Gathers a picklable object from every rank to the main process: the list, in rank order, there;
    None on the other ranks."""
    world_size = get_world_size()
    if world_size == 1:
        return [obj]
    output = [None] * world_size if is_main_process() else None
    dist.gather_object(obj, output, dst=0)
    return output


def broadcast_object(obj, src: int = 0):
    """Returns ``obj`` as it is on rank ``src``, on every rank."""
    if get_world_size() == 1:
        return obj
    holder = [obj]
    dist.broadcast_object_list(holder, src=src)
    return holder[0]


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sums ``tensor`` in place across the ranks that see different data (every rank, without a device mesh; see
    :func:`set_data_parallel`) and returns it (on whatever device it is). For counts and sums of metrics."""
    if get_data_parallel_world_size() > 1:
        _all_reduce(tensor, dist.ReduceOp.SUM, _data_group())
    return tensor


def sum_over_ranks(*values) -> list:
    """The sums across ranks (those that see different data, as :func:`all_reduce_sum`) of ``values`` (numbers and
    0-d tensors, on one device), as floats.

    Every rank must call it with as many values. Distributed: one all-reduce and one host
    sync. A single process reads the tensors and builds nothing, so a log line or a
    progress-bar refresh costs no extra tensor ops.
    """
    if get_data_parallel_world_size() == 1:
        return [float(value) for value in values]
    device = next((value.device for value in values if isinstance(value, torch.Tensor)), torch.device("cpu"))
    stacked = torch.stack([value.to(torch.float64) if isinstance(value, torch.Tensor)
                           else torch.tensor(float(value), dtype=torch.float64, device=device) for value in values])
    return all_reduce_sum(stacked).tolist()


def all_reduce_max(tensor: torch.Tensor) -> torch.Tensor:
    """Takes the element-wise maximum of ``tensor`` in place across ranks and returns it."""
    if get_world_size() > 1:
        _all_reduce(tensor, dist.ReduceOp.MAX)
    return tensor


def _all_reduce(tensor, op, group=None):
    # NCCL reduces CUDA tensors only, gloo CPU ones (here): move there and back when needed.
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    if tensor.device == device:
        dist.all_reduce(tensor, op=op, group=group)
    else:
        moved = tensor.to(device)
        dist.all_reduce(moved, op=op, group=group)
        tensor.copy_(moved)


def reduce_dict(input_dict: dict, average: bool = True) -> dict:
    """Reduces a dict of scalar tensors across ranks; every rank gets the result.

    Keys are sorted so that all ranks reduce the same values in the same order.
    """
    world_size = get_world_size()
    if world_size == 1 or not input_dict:
        return input_dict
    with torch.no_grad():
        names = sorted(input_dict)
        values = torch.stack([torch.as_tensor(input_dict[k]).detach().float().reshape(()) for k in names])
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
        if average:
            values /= world_size
    return dict(zip(names, values))


def get_device(gpu_id=None) -> torch.device:
    """The device this process trains on.

    Under several processes each one takes the GPU of its local rank (choose GPUs with
    ``CUDA_VISIBLE_DEVICES``); one process takes the first id of ``gpu_id``. With
    ``gpu_id`` empty or negative, the CPU; without CUDA, the CPU too, with a warning when a
    process asked for more than the default ``[0]`` ("the first GPU, if any").
    """
    ids = as_id_list(gpu_id)
    if not ids or ids[0] < 0:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        if ids != [0] and get_world_size() == 1:  # several processes: launch() has said it already
            _warn_once(f"gpu_id {ids} asks for GPU(s) but CUDA is not available here: training on the CPU")
        return torch.device("cpu")
    if get_world_size() > 1:
        return torch.device("cuda", get_local_rank())
    if ids[0] >= torch.cuda.device_count():
        raise LaunchError(f"gpu_id {ids} asks for GPU {ids[0]} but this machine has {torch.cuda.device_count()}; "
                          f"list only ids below {torch.cuda.device_count()}")
    return torch.device("cuda", ids[0])


_warned = set()


def _warn_once(message: str) -> None:
    if message not in _warned and is_main_process():
        _warned.add(message)
        get_logger().warning(message)


def as_id_list(gpu_id) -> list:
    """``gpu_id`` (None, an int, a string or a list of them) as a list of ints."""
    if gpu_id is None:
        return []
    try:
        return [int(i) for i in ([gpu_id] if isinstance(gpu_id, (int, str)) else gpu_id)]
    except (TypeError, ValueError):
        raise ConfigError(f"gpu_id expects an integer or a list of integers (GPU numbers), got {gpu_id!r}") from None


def broadcast_tensors(value, src: int, group, device):
    """``value`` (tensors, or tuples, lists and dicts of them, or None) as global rank ``src`` holds it, on every
    process of ``group``: its layout first, then each tensor."""
    mine = dist.get_rank() == src
    layout = [_layout(value) if mine else None]
    dist.broadcast_object_list(layout, src=src, group=group)
    return _fill(layout[0], value if mine else None, src, group, device)


def _layout(value):
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype)
    if isinstance(value, dict):
        return ("dict", {key: _layout(item) for key, item in value.items()})
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, [_layout(item) for item in value])
    return ("value", value)


def _fill(layout, value, src, group, device):
    kind = layout[0]
    if kind == "tensor":
        tensor = value.detach().contiguous() if value is not None else torch.empty(layout[1], dtype=layout[2],
                                                                                  device=device)
        dist.broadcast(tensor, src=src, group=group)
        return tensor
    if kind == "dict":
        return {key: _fill(item, None if value is None else value[key], src, group, device)
                for key, item in layout[1].items()}
    if kind in ("tuple", "list"):
        items = [_fill(item, None if value is None else value[index], src, group, device)
                 for index, item in enumerate(layout[1])]
        return tuple(items) if kind == "tuple" else items
    return layout[1]
