"""One consolidated weights file from any checkpoint a run wrote, read in one process with no process group.

A sharded checkpoint (``model/last/``, written by every rank of an FSDP or async run) holds
each parameter in pieces; :func:`write_weights` joins them into a plain ``state_dict`` that
``torch.load(..., weights_only=True)`` reads and the model without any wrapper loads.
"""
from ..checkpoint.files import save_checkpoint
from ..checkpoint.discovery import is_sharded_checkpoint
from ..checkpoint.sharded import consolidated_weights
from ..checkpoint.weights import read_model_weights


def read_weights(checkpoint: str) -> dict:
    """The training weights in ``checkpoint``: a sharded directory, ``last.pth`` or a weights file."""
    if is_sharded_checkpoint(checkpoint):
        return consolidated_weights(checkpoint)
    return read_model_weights(checkpoint)


def write_weights(checkpoint: str, out: str) -> dict:
    """Writes the training weights of ``checkpoint`` to ``out`` (atomically) and returns them."""
    weights = read_weights(checkpoint)
    save_checkpoint(weights, out)
    return weights
