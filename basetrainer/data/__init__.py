"""Data: loaders sharded by global rank that resume mid-epoch (``loaders``, ``samplers``), and the
datasets of the built-in pipelines: a checked ImageFolder and the bundled handwritten digits (written whole or not
at all, ``trees``); ``images/``: image folders decoded and augmented as the ``decoder`` setting says, and the
photo-like JPEG digits.

Importing this package loads nothing: the names below are resolved on first use, so the
engine's loaders come without torchvision (which ``folder`` imports).
"""
from ..utils.lazy import lazy_attributes, names_of

_LAZY = {
    "basetrainer.data.loaders": ("build_dataloader", "iterate_from", "num_batches", "num_samples", "is_sharded",
                                 "has_length", "sample_order", "set_batch_size", "set_epoch"),
    "basetrainer.data.samplers": ("find_sampler", "TrainSampler", "StreamSampler", "EvalSampler"),
    "basetrainer.data.folder": ("CheckedImageFolder", "check_same_classes"),
    "basetrainer.data.digits": ("load_digits", "split_indices", "write_digits_imagefolder"),
}

__all__ = names_of(_LAZY)

__getattr__ = lazy_attributes(__name__, _LAZY)
