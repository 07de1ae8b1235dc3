"""The losses of the text task, computed from the model's logits as the HF models compute theirs (float32
logits, the labels shifted by one, ``IGNORE`` ignored), so that a run and the HF ``Trainer``
agree on the same batches.

A training batch's causal-LM loss is the mean over the tokens that take a loss in this batch on every
data-parallel process: each process divides its sum by the count over all of them (one all-reduce of a
number) and multiplies by their number, which DDP's and FSDP's averaging of the gradients undoes. Two
processes with batches of ``b`` sequences then take the same steps as one process with ``2b``, whatever the
number of padding and prompt tokens in each; without it each process's mean would weigh its own tokens.
"""
import torch
import torch.nn.functional as F

from ...distributed import comm
from .encoding import IGNORE


def token_losses(logits: torch.Tensor, labels: torch.Tensor) -> tuple:
    """``(sum, count)``: the summed cross-entropy of predicting ``labels[:, t]`` from position ``t - 1``, and the
    number of tokens that took a loss."""
    shifted = F.pad(labels, (0, 1), value=IGNORE)[:, 1:]
    total = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), shifted.reshape(-1),
                            ignore_index=IGNORE, reduction="sum")
    return total, (shifted != IGNORE).sum()


def training_loss(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """The training loss of one process's batch: see the module docstring."""
    processes = comm.get_data_parallel_world_size()
    if processes > 1:
        count = comm.all_reduce_sum(count.clone())
    return total * processes / count.clamp(min=1)
