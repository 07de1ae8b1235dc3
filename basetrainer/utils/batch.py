"""What the loop does with a batch and with the losses computed from it."""
import torch

_SEQUENCES = (tuple, list)


def move_to_device(batch, device: torch.device, channels_last: bool = False):
    """Moves every tensor in a tensor/tuple/list/dict batch to ``device`` without blocking.

    4-D tensors become channels_last when asked, so that convolutions take the fast path. An element with a
    ``finish_on_device(device, channels_last)`` method is replaced by what it returns: a loader's batch that still
    has work to do on the device, after the copy (uint8 images made float and normalised there, JPEGs decoded on
    the GPU: :mod:`basetrainer.data.images.on_device`).
    """
    if hasattr(batch, "finish_on_device"):
        return batch.finish_on_device(device, channels_last)
    if isinstance(batch, torch.Tensor):
        batch = batch.to(device, non_blocking=True)
        if channels_last and batch.dim() == 4:
            batch = batch.contiguous(memory_format=torch.channels_last)
        return batch
    if isinstance(batch, (list, tuple)):
        moved = [move_to_device(b, device, channels_last) for b in batch]
        if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
            return type(batch)(*moved)
        return type(batch)(moved)
    if isinstance(batch, dict):
        return type(batch)((k, move_to_device(v, device, channels_last)) for k, v in batch.items())
    return batch


def has_device_work(batch) -> bool:
    """Whether ``batch`` (or an element of it, one level down) has work to finish on the device. Asked of every
    training batch on the CPU: a plain loop, without the generator that ``any`` would need."""
    if isinstance(batch, dict):
        batch = batch.values()
    elif not isinstance(batch, _SEQUENCES):
        return hasattr(batch, "finish_on_device")
    for item in batch:
        if hasattr(item, "finish_on_device"):
            return True
    return False


def total_loss(losses) -> torch.Tensor:
    """The scalar to call backward on: the loss itself, or the sum of a list or dict of losses."""
    if isinstance(losses, torch.Tensor):
        return losses
    if isinstance(losses, dict):
        losses = list(losses.values())
    if isinstance(losses, (list, tuple)) and losses:
        total = losses[0]
        for term in losses[1:]:
            total = total + term
        return total
    raise TypeError(
        f"run_step returned losses of type {type(losses).__name__}; return a tensor, or a list or dict of tensors"
    )


def batch_size(inputs) -> int:
    """Number of samples in a batch: the first dimension of its first tensor (0 if none), or the length of
    its first item when that is a list of tensors (a detector's batch: ``(images, targets)``, two lists, the
    images possibly of different sizes)."""
    first = inputs[0] if isinstance(inputs, _SEQUENCES) and inputs else inputs
    if isinstance(first, torch.Tensor) and first.ndim:  # the usual (inputs, targets) batch: called every step
        return first.shape[0]
    if isinstance(first, list) and first and isinstance(first[0], torch.Tensor):
        return len(first)
    if isinstance(inputs, torch.Tensor):
        return 1
    if isinstance(inputs, dict):
        inputs = list(inputs.values())
    if isinstance(inputs, (list, tuple)):
        for item in inputs:
            n = batch_size(item)
            if n:
                return n
    return 0


def stack_scalars(values) -> torch.Tensor:
    """One 1-D tensor from per-batch scalars: a single op when they share a dtype, as they do in a run."""
    try:
        return torch.stack(values)
    except RuntimeError:  # mixed dtypes or shapes: normalise each first
        return torch.stack([v.float().reshape(()) for v in values])
