"""Deterministic algorithms: with ``deterministic: true`` two runs on the same machine are bitwise equal.

Seeding (the trainer does it) fixes the random streams, and basetrainer's loaders fix the
order and the workers' seeds; what is left is the kernels. On the CPU torch's kernels are
deterministic already. On GPUs some kernels (atomic adds in scatter, index_add and many
backward passes, cuDNN's algorithm search, cuBLAS's split workspaces) give results that
differ in the last bits from run to run; this module asks for the deterministic ones.
"""
import os

import torch


def make_deterministic(mode) -> None:
    """``mode`` True: deterministic algorithms only (an operation without one raises, naming
    itself); "warn": warn there instead. The trainer calls this first thing, before the model
    exists: cuBLAS reads ``CUBLAS_WORKSPACE_CONFIG`` when its first handle is made (set it in
    the environment yourself when matrix products ran on the GPU earlier in the process)."""
    if not mode:
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=mode == "warn")
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
