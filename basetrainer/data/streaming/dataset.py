"""A folder of shards, local or remote, as a map-style dataset: what every sampler, loader and resume of the engine
already works with.

Random access into shards is what makes the engine's guarantees hold on streams: the training sampler deals an
epoch's order over ranks, and loader workers take whole batches, so each sample is read once per epoch over ranks x
workers; a resume skips the samples the ranks took and shares the rest out again on any number of processes; replica
groups deal the rest of an epoch over the groups alive; evaluation shards without padding. The order comes from
:meth:`ShardDataset.epoch_permutation` (shards shuffled, then samples within a window of shards: see
:mod:`.order`), so the processes read a few shards at a time and a cache holds only those.

A training sample's random augmentation is drawn from streams seeded by ``(seed, epoch, index)``: the same for a
sample whichever process, worker or resumed run reads it, which makes a resume bitwise with loader workers too.
"""
import contextlib
import io
import json
import os
import random
import tempfile
import warnings

import numpy as np
import torch
from torch.utils.data import Dataset

from ...errors import ConfigError, DataError
from ...utils.log import get_logger
from . import library
from .cache import ShardCache, fetch_with_retries
from .location import INDEX, MANIFEST, ShardLocation, parse_size
from .manifest import read_manifest
from .order import shard_window_order
from .sources import ShardMixture, parse_sources

logger = get_logger()

KINDS = ("images", "coco", "dataset")


class ShardDataset(Dataset):
    """The samples of the shards at ``location`` (see :func:`open_shards` for the arguments)."""

    def __init__(self, location, transform=None, cache=None, cache_limit=None, retry_seconds=60.0,
                 shuffle_window=4, on_bad_image="raise", name="data", decode=None):
        if int(shuffle_window) < 1:
            raise ConfigError(f"shards.shuffle_window: {shuffle_window} is below 1; give the shards read at once")
        library.litdata()  # here, in the training process: loader workers forked from it find it imported
        self.location = ShardLocation(location, name)
        self.name, self.transform, self.decode, self.on_bad_image = name, transform, decode, on_bad_image
        self.window, self.retry_s = int(shuffle_window), float(retry_seconds)
        self.seed = self.epoch = None  # set by the training sampler each epoch (sampler_epoch)
        self.cache = None
        if self.location.remote:
            manifest_text, index_text = self._fetch_description(cache)
            self.manifest = read_manifest(manifest_text, index_text, str(self.location))
            self.cache = ShardCache(self.location, self.manifest, cache, parse_size(cache_limit, "shards.cache_limit"),
                                    self.retry_s, keep=2 * self.window)
            self.cache.put_text(INDEX, index_text)
        else:
            self.manifest = read_manifest(_read_or_none(self.location.file(MANIFEST)),
                                          _read_or_none(self.location.file(INDEX)) or "{}", str(self.location))
            self._check_local_sizes()
        self._reader, self._reader_pid, self._warned = None, None, set()
        self._shard_sizes = None  # made on first use (shard_sizes)

    # ------------------------------------------------------------------ what the engine reads
    def __len__(self) -> int:
        return self.manifest.samples

    @property
    def kind(self) -> str:
        return self.manifest.kind

    @property
    def classes(self) -> list:
        """The class names of image-folder shards, in label order."""
        return list(self.manifest.meta.get("classes", []))

    @property
    def categories(self) -> list:
        """The category names of COCO shards, labels 1 to n (0 is the background)."""
        return list(self.manifest.meta.get("categories", []))

    @property
    def category_ids(self) -> list:
        """The COCO id of each label - 1 of COCO shards."""
        return list(self.manifest.meta.get("category_ids", []))

    @property
    def num_classes(self) -> int:
        return len(self.classes or self.categories)

    @property
    def image_ids(self) -> list:
        """Each image's COCO id in COCO shards, in dataset order."""
        return list(self.manifest.meta.get("image_ids", []))

    @property
    def shard_sizes(self) -> np.ndarray:
        """The samples of each shard, in the manifest's order (read from it once)."""
        if self._shard_sizes is None:
            self._shard_sizes = np.array([int(shard["samples"]) for shard in self.manifest.shards], dtype=np.int64)
        return self._shard_sizes

    def epoch_permutation(self, seed: int, epoch: int):
        """The order of ``epoch``'s samples (the training sampler's, instead of a plain permutation): an
        :class:`~basetrainer.data.epoch_order.Order` that computes them, holding 16 bytes a shard and 64 a window."""
        return shard_window_order(self.shard_sizes, seed, epoch, self.window)

    def sampler_epoch(self, seed: int, epoch: int) -> None:
        """Called by the training sampler before each epoch (before its workers start): seeds the augmentation."""
        self.seed, self.epoch = seed, epoch

    def shard_url(self, index: int) -> str:
        return self.location.file(self.manifest.shards[self.manifest.shard_of(index)]["file"])

    # ------------------------------------------------------------------ reading
    def __getitem__(self, index):
        if not 0 <= index < len(self):
            raise IndexError(f"{self.name}: sample {index} of {len(self)}")
        for _ in range(len(self)):
            record = self._record(index)
            with _seeded(self.seed, self.epoch, index):  # a decode may draw the augmentation too (decode=)
                try:
                    sample = self._decoded(record)
                except Exception as error:  # noqa: BLE001 - Pillow fails on bad files in many ways
                    where = f"sample {index} ({record.get('name', '?')}) of shard {self.shard_url(index)}" \
                        if isinstance(record, dict) else f"sample {index} of shard {self.shard_url(index)}"
                    if self.on_bad_image == "raise":
                        raise DataError(f"{self.name}: cannot decode {where} ({_reason(error)}); write the shards "
                                        f"again from good files, or set on_bad_image: skip") from None
                    if where not in self._warned:
                        self._warned.add(where)
                        logger.warning("%s: skipping %s (%s)", self.name, where, _reason(error))
                    index = (index + 1) % len(self)
                    continue
                return self._transformed(sample)
        raise DataError(f"{self.name}: no sample of {self.location} can be decoded; check the shards")

    def _record(self, index):
        """The stored item of sample ``index``, its shard made local first (again if another process evicted it
        between the fetch and the read)."""
        position = self.manifest.shard_of(index)
        folder = self.cache.folder if self.cache is not None else self.location.url
        for attempt in range(2):
            path = self.cache.fetch(position) if self.cache is not None else None
            try:
                if self.manifest.kind != "dataset":  # records of files and numbers: no tensors
                    return self._litdata_reader(folder)[index]
                with warnings.catch_warnings():  # a tensor over the read's own bytes: copied below
                    warnings.filterwarnings("ignore", message="The given buffer is not writable")
                    return _own_copy(self._litdata_reader(folder)[index])
            except Exception as error:  # noqa: BLE001 - a damaged chunk fails inside litdata in many ways
                if attempt == 0 and path is not None and not os.path.exists(path):
                    continue
                raise DataError(f"{self.name}: cannot read sample {index} from shard {self.shard_url(index)} "
                                f"({_reason(error)}); write the shards again with basetrainer shards") from None

    def _decoded(self, record):
        kind = self.manifest.kind
        if kind == "images" and self.decode is not None:
            return self.decode(record["image"], record.get("name", "")), int(record["label"])
        if kind == "images":
            return decode_image(record["image"]), int(record["label"])
        if kind == "coco":
            return decode_pixels(record["image"]), record["image_id"], json.loads(record["boxes"])
        return record

    def _transformed(self, sample):
        if self.transform is None:
            return sample
        if self.manifest.kind == "images":
            return sample if self.decode is not None else (self.transform(sample[0]), sample[1])
        return self.transform(sample)

    def _litdata_reader(self, folder):
        if self._reader is None or self._reader_pid != os.getpid():  # a forked worker opens its own
            self._reader, self._reader_pid = library.local_reader(folder), os.getpid()
        return self._reader

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_reader"] = None  # a worker opens litdata's reader itself
        return state

    # ------------------------------------------------------------------ checks before the first read
    def _fetch_description(self, cache_root):
        """The texts of the remote ``shards.json`` (None when absent: a folder litdata wrote) and ``index.json``."""
        parent = self.location.cache_folder(cache_root)
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as error:
            raise DataError(f"{self.name}: cannot make the cache folder {parent} ({error.strerror}); point "
                            f"shards.cache at a writable folder") from None
        with tempfile.TemporaryDirectory(prefix="incoming-", dir=parent) as incoming:
            texts = []
            for filename in (MANIFEST, INDEX):
                path = os.path.join(incoming, filename)
                try:
                    fetch_with_retries(self.location.file(filename), path, self.retry_s, self.name)
                    texts.append(open(path, "rb").read())
                except FileNotFoundError:
                    texts.append(None)
        if texts[1] is None:
            raise DataError(f"{self.name}: {self.location} holds no shards (neither {MANIFEST} nor {INDEX} is "
                            f"there); write them with basetrainer shards and upload the folder")
        return texts

    def _check_local_sizes(self) -> None:
        for shard in self.manifest.shards:
            path = self.location.file(shard["file"])
            size = os.path.getsize(path) if os.path.isfile(path) else None
            if size != int(shard["bytes"]):
                said = "is missing" if size is None else f"has {size} bytes where the manifest says {shard['bytes']}"
                raise DataError(f"{self.name}: shard {path} {said}; write the shards again with basetrainer shards")


def open_shards(location, transform=None, cache=None, cache_limit=None, retry_seconds=60.0,
                shuffle_window=4, on_bad_image="raise", name="data", decode=None) -> ShardDataset:
    """The one call for a user's own ``build_train_loader`` / ``build_test_loader``: the shards that ``basetrainer
    shards`` wrote at ``location`` (a local folder, or ``s3://``, ``gs://``, ``azure://``, ``hf://``, ``r2://``),
    as a dataset to give ``self.build_dataloader``::

        def build_train_loader(self, cfg):
            return self.build_dataloader(open_shards("s3://bucket/train", transform=augment), batch_size=64)

    A sample of image-folder shards is ``(transform(PIL image), label)``, as ``ImageFolder`` gives, or with
    ``decode`` ``(decode(the image file's bytes, its name), label)`` instead (an image folder's decoder,
    :func:`basetrainer.data.images.decoders.image_decoder`: the same path from bytes to batch as a folder's); of COCO
    shards
    ``transform((pixels, image_id, boxes))`` (pixels uint8 ``(H, W, 3)``, boxes ``[x1, y1, x2, y2, label]``); of a
    dataset's shards ``transform(item)`` (the item as the dataset gave it; no transform: as it is). Remote
    shards are downloaded into ``cache`` (default ``~/.cache/basetrainer/shards``), which keeps at most
    ``cache_limit`` bytes (``"50GB"``; None: no limit), each download tried again for ``retry_seconds``;
    ``shuffle_window`` is how many shards an epoch's order reads at once. Everything is checked here, before the
    first read: one-line errors name the location or the shard.

    ``location`` may be a list of sources, ``[{"path": "s3://bucket/web", "weight": 3}, {"path": ..., "weight":
    1}]``: one data set (a :class:`~basetrainer.data.streaming.sources.ShardMixture`) whose training epochs mix
    them by weight (see :mod:`.mixture`)."""
    options = {"transform": transform, "cache": cache, "cache_limit": cache_limit, "retry_seconds": retry_seconds,
               "shuffle_window": shuffle_window, "on_bad_image": on_bad_image, "decode": decode}
    if not isinstance(location, (list, tuple)):
        return ShardDataset(location, name=name, **options)
    sources = parse_sources(location, name)
    datasets = [ShardDataset(path, name=f"{name}[{i}]", **options) for i, (path, _) in enumerate(sources)]
    return ShardMixture(datasets, [weight for _, weight in sources], name)


def decode_image(data: bytes):
    """An image file's bytes as an RGB PIL image (what ImageFolder's loader gives)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return image.convert("RGB")


def decode_pixels(data: bytes):
    """An image file's bytes as RGB pixels, uint8 ``(H, W, 3)``."""
    return np.asarray(decode_image(data)).copy()


@contextlib.contextmanager
def _seeded(seed, epoch, index):
    """torch's, Python's and NumPy's random streams seeded by ``(seed, epoch, index)`` for the block; in the
    training process (no loader workers) put back afterwards, so that its own streams go on as if nothing was
    drawn (a worker's streams serve its samples alone). Nothing outside a training epoch."""
    if seed is None:
        yield
        return
    in_worker = torch.utils.data.get_worker_info() is not None
    states = None if in_worker else (torch.get_rng_state(), random.getstate(), np.random.get_state())
    mixed = (seed * 1_000_003 + epoch * 7_919 + index * 104_729 + 0x5EED) % (2**31 - 1)
    torch.default_generator.manual_seed(mixed)  # the CPU's: torch.manual_seed would also queue every CUDA device
    random.seed(mixed)
    np.random.seed(mixed)
    try:
        yield
    finally:
        if states is not None:
            torch.set_rng_state(states[0])
            random.setstate(states[1])
            np.random.set_state(states[2])


def _own_copy(item):
    """``item`` with its tensors copied: litdata gives tensors over the read's bytes, which are not writable."""
    if isinstance(item, torch.Tensor):
        return item.clone()
    if isinstance(item, (list, tuple)):
        return type(item)(_own_copy(value) for value in item)
    if isinstance(item, dict):
        return {key: _own_copy(value) for key, value in item.items()}
    return item


def _read_or_none(path):
    try:
        with open(path, "rb") as file:
            return file.read()
    except FileNotFoundError:
        return None


def _reason(error) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
