"""Data: loaders sharded by global rank that resume mid-epoch (``loaders``, ``samplers``), and the
datasets of the built-in pipelines: a checked ImageFolder and the bundled handwritten digits.

Importing this package loads nothing: the names below are resolved on first use, so the
engine's loaders come without torchvision (which ``folder`` imports).
"""
_LAZY = {
    "build_dataloader": "basetrainer.data.loaders",
    "iterate_from": "basetrainer.data.loaders",
    "num_batches": "basetrainer.data.loaders",
    "num_samples": "basetrainer.data.loaders",
    "is_sharded": "basetrainer.data.loaders",
    "has_length": "basetrainer.data.loaders",
    "sample_order": "basetrainer.data.loaders",
    "set_batch_size": "basetrainer.data.loaders",
    "set_epoch": "basetrainer.data.loaders",
    "find_sampler": "basetrainer.data.samplers",
    "TrainSampler": "basetrainer.data.samplers",
    "StreamSampler": "basetrainer.data.samplers",
    "EvalSampler": "basetrainer.data.samplers",
    "CheckedImageFolder": "basetrainer.data.folder",
    "check_same_classes": "basetrainer.data.folder",
    "load_digits": "basetrainer.data.digits",
    "split_indices": "basetrainer.data.digits",
    "write_digits_imagefolder": "basetrainer.data.digits",
}

__all__ = list(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'basetrainer.data' has no attribute {name!r}")
