"""Old import path of the data-loading helpers: ``build_dataloader`` is :func:`.engine.data.build_dataloader`."""
from ..engine import data


def build_dataloader(dataset, batch_size, num_workers, shuffle=True, persistent_workers=False, phase="train",
                     distributed=True, **kwargs):
    """:func:`basetrainer.engine.data.build_dataloader` with the old order of arguments: sharded by global rank."""
    return data.build_dataloader(dataset, batch_size, num_workers, shuffle=shuffle, phase=phase,
                                 distributed=distributed, persistent_workers=persistent_workers, **kwargs)


_REMOVED = {
    "Collation": "torch's default collate stacks tensors of tuple and dict samples; for samples of varying size "
                 "pass your own collate_fn to build_dataloader",
    "build_model_parallel": "call self.build_model_parallel(model, device_ids) in your trainer's build_model",
}


def __getattr__(name):
    if name in _REMOVED:
        raise ImportError(f"{__name__}.{name} was removed: {_REMOVED[name]}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
