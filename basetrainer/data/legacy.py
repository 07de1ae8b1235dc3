"""The earlier library's ``build_dataloader`` (``basetrainer.utils.torch_data``): its order of arguments."""
from .loaders import build_dataloader as _build_dataloader


def build_dataloader(dataset, batch_size, num_workers, shuffle=True, persistent_workers=False, phase="train",
                     distributed=None, **kwargs):
    """:func:`basetrainer.data.build_dataloader` with the old order of arguments: sharded by global rank
    (``distributed`` is kept for old scripts; the process group decides)."""
    return _build_dataloader(dataset, batch_size, num_workers, shuffle=shuffle, phase=phase,
                             persistent_workers=persistent_workers, **kwargs)
