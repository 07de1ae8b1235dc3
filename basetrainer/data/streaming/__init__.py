"""Streaming shards: data sets bigger than a disk, read from local folders or object storage.

``basetrainer shards`` (:mod:`basetrainer.tasks.shards`) writes an image folder, COCO data or any map-style dataset
as shards of litdata's format with a manifest (:mod:`.writer`, :mod:`.manifest`); :func:`open_shards` reads them
back as a map-style dataset (:mod:`.dataset`), remote ones through a local cache with a size limit and a retry
budget (:mod:`.cache`, :mod:`.location`), in an order that reads a few shards at a time (:mod:`.order`), computed
rather than listed; a list of sources is one data set mixed by weight (:mod:`.sources`, :mod:`.mixture`). The
engine's samplers, resume, elastic resume and replica groups then work on them as on any dataset; the checkpoint
part :mod:`.position` records which shards a run reads. litdata is an extra (:mod:`.library`).

Importing this package loads neither litdata nor torchvision.
"""
from ...utils.lazy import lazy_attributes, names_of

_LAZY = {
    "basetrainer.data.streaming.dataset": ("open_shards", "ShardDataset"),
    "basetrainer.data.streaming.location": ("is_shard_location", "parse_size"),
    "basetrainer.data.streaming.writer": ("write_shards", "image_folder_records"),
    "basetrainer.data.streaming.position": ("stream_parts",),
}

__all__ = names_of(_LAZY)

__getattr__ = lazy_attributes(__name__, _LAZY)
