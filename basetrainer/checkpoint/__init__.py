"""Checkpoints: files written atomically with checksums and read without running code (``files``),
model weights in them (``weights``), random generator states (``rng``), sharded DCP directories
and their safe reader (``sharded``, ``safe_dcp``), and the :class:`~.manager.CheckpointManager`
that owns what a training checkpoint holds and where it goes.

Below the training engine: the manager is handed the stateful parts of a run, it does not reach for them.
"""
from .files import checksum_path, load_checkpoint, previous_path, save_checkpoint, verify_checksum
from .rng import get_rng_state, set_rng_state
from .weights import (
                      check_shapes,
                      extract_model_state,
                      load_weights,
                      model_state_dict,
                      read_model_weights,
                      strip_prefixes,
)

__all__ = ["check_shapes", "checksum_path", "extract_model_state", "get_rng_state", "load_checkpoint",
           "load_weights", "model_state_dict", "previous_path", "read_model_weights", "save_checkpoint",
           "set_rng_state", "strip_prefixes", "verify_checksum"]
