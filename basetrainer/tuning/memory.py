"""The memory a few training steps take, measured as the batch-size finder needs it.

On CUDA, the peak of what torch allocates on the device during the steps, less what it held before; an
out-of-memory error is the answer "does not fit". On the CPU, the peak of this process's resident memory during
the steps, less what it was before: Linux's ``/proc/self/status`` (VmHWM, the peak, which writing 5 to
``/proc/self/clear_refs`` resets to the current size), since psutil is no dependency of basetrainer. Before each
measurement freed memory goes back to the system (glibc's ``malloc_trim``; CUDA's cache), so that
what a larger batch took and freed does not count for the next one.
"""
import ctypes
import gc
import os

import torch

from ..errors import ConfigError

MIB = 2 ** 20
_PROC = "/proc/self"


class PeakGrowth:
    """``with meter: <steps>``, then ``meter.growth``: bytes above the start at the peak of the block."""

    def __init__(self, device: torch.device):
        self.device = device
        self.growth = 0
        self._start = 0
        if device.type == "cpu" and not _can_reset_peak():
            raise ConfigError("batch-find on the CPU reads the process's peak memory from /proc/self (Linux), which "
                              "this system lacks or refuses: run it on Linux, or on a GPU")

    def __enter__(self):
        release_freed_memory(self.device)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self._start = torch.cuda.memory_allocated(self.device)
        else:
            with open(f"{_PROC}/clear_refs", "w") as stream:
                stream.write("5")  # VmHWM := VmRSS
            self._start = _status_bytes("VmRSS")
        return self

    def __exit__(self, *error):
        peak = torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else _status_bytes("VmHWM")
        self.growth = max(0, peak - self._start)
        return False


def available_memory(device: torch.device) -> int:
    """Bytes free for this process to take: CUDA's free device memory, or the machine's MemAvailable."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    with open("/proc/meminfo") as stream:
        for line in stream:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise ConfigError("/proc/meminfo gives no MemAvailable here: give max_memory (MiB) to batch-find")


def release_freed_memory(device: torch.device, collect: bool = False) -> None:
    """Returns memory that nothing holds any more to the system (or, on CUDA, from torch's cache); ``collect``
    first frees what only reference cycles hold (a failed step's traceback: a full collection, ~0.1 s)."""
    if collect:
        gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif _malloc_trim is not None:
        _malloc_trim(0)


def _status_bytes(field: str) -> int:
    with open(f"{_PROC}/status") as stream:
        for line in stream:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024  # kB
    raise ConfigError(f"/proc/self/status gives no {field} here: run batch-find on Linux, or on a GPU")


def _can_reset_peak() -> bool:
    return os.access(f"{_PROC}/clear_refs", os.W_OK) and os.path.exists(f"{_PROC}/status")


def _find_malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc; absent from musl and other systems' C libraries
    except (AttributeError, OSError):
        return None


_malloc_trim = _find_malloc_trim()
