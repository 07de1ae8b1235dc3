"""Several folders of shards read as one data set, mixed by weight: what ``open_shards`` gives for a list of
sources (``[{"path": ..., "weight": ...}, ...]``), and what a task's ``train_data`` list opens.

Samples are numbered source by source (the first source's, then the second's...), so that evaluation, which reads
a data set in its order, reads every sample of every source once. The training order is
:class:`~basetrainer.data.streaming.mixture.Mixture`'s: each source's share of an epoch exact from the weights,
smaller sources repeated, larger ones read without repeats within their own epoch. Each epoch, the log says what
each source gave.
"""
import hashlib
import types

import numpy as np
from torch.utils.data import Dataset

from ...errors import ConfigError, DataError
from ...utils.log import get_logger
from .mixture import Mixture, mixture_order

logger = get_logger()


def parse_sources(sources, name: str = "train_data") -> list:
    """``[(path, weight)]`` from a list of ``{"path": ..., "weight": ...}`` (or of paths, weight 1): one-line errors
    for anything else."""
    if not isinstance(sources, (list, tuple)) or not sources:
        raise ConfigError(f"{name}: give a folder or URL, or a non-empty list of {{path, weight}}")
    parsed = []
    for i, source in enumerate(sources):
        if isinstance(source, str):
            source = {"path": source}
        if not isinstance(source, dict) or set(source) - {"path", "weight"} or not source.get("path"):
            raise ConfigError(f"{name}[{i}]: {source!r} is not {{path: <folder or URL>, weight: <number>}}; give "
                              f"each source as a path and a weight")
        weight = source.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0 or weight == float("inf"):
            raise ConfigError(f"{name}[{i}].weight: {weight!r} is not a positive number; give the source's share as "
                              f"a weight above 0 (weights are relative: 3 and 1 give 75% and 25%)")
        parsed.append((str(source["path"]), float(weight)))
    return parsed


class ShardMixture(Dataset):
    """``datasets`` (each a :class:`~basetrainer.data.streaming.dataset.ShardDataset`) read as one, mixed by
    ``weights`` in training."""

    def __init__(self, datasets: list, weights: list, name: str = "train_data"):
        kinds = {dataset.kind for dataset in datasets}
        if len(kinds) > 1:
            raise DataError(f"{name}: the sources hold shards of different kinds ({', '.join(sorted(kinds))}); mix "
                            f"sources of one kind")
        for dataset in datasets[1:]:
            if dataset.classes != datasets[0].classes or dataset.categories != datasets[0].categories:
                raise DataError(f"{name}: {dataset.location} names other classes than {datasets[0].location}; mix "
                                f"sources written with the same classes")
        self.datasets, self.weights, self.name = list(datasets), list(weights), name
        self.first = np.concatenate([[0], np.cumsum([len(dataset) for dataset in datasets])]).astype(np.int64)
        self.window = datasets[0].window
        self._logged = None

    def __len__(self) -> int:
        return int(self.first[-1])

    def __getitem__(self, index):
        if not 0 <= index < len(self):
            raise IndexError(f"{self.name}: sample {index} of {len(self)}")
        source = int(np.searchsorted(self.first, index, side="right")) - 1
        return self.datasets[source][int(index - self.first[source])]

    # what the tasks read of a data set, the same in every source
    kind = property(lambda self: self.datasets[0].kind)
    classes = property(lambda self: self.datasets[0].classes)
    categories = property(lambda self: self.datasets[0].categories)
    category_ids = property(lambda self: self.datasets[0].category_ids)
    num_classes = property(lambda self: self.datasets[0].num_classes)

    @property
    def transform(self):
        return self.datasets[0].transform

    @property
    def location(self) -> str:
        """The sources and their weights, as the checkpoint's ``stream`` part records where a run read."""
        return " + ".join(f"{dataset.location} x {weight:g}" for dataset, weight in zip(self.datasets, self.weights))

    @property
    def manifest(self):
        """One digest of the sources' manifests and of their weights, which identifies the shards read."""
        text = "|".join(f"{dataset.manifest.digest}:{weight!r}" for dataset, weight in zip(self.datasets, self.weights))
        return types.SimpleNamespace(digest=hashlib.sha256(text.encode()).hexdigest())

    def _sources(self) -> list:
        return [(dataset.shard_sizes, weight) for dataset, weight in zip(self.datasets, self.weights)]

    def epoch_permutation(self, seed: int, epoch: int):
        """The order of ``epoch``'s samples (:class:`~basetrainer.data.streaming.mixture.Mixture`'s)."""
        return mixture_order(self._sources(), seed, epoch, self.window)

    def sampler_epoch(self, seed: int, epoch: int) -> None:
        """Called by the training sampler before each epoch: seeds each source's augmentation and logs what each
        source gives to the epoch."""
        for dataset in self.datasets:
            dataset.sampler_epoch(seed, epoch)
        if self._logged == (seed, epoch):
            return
        self._logged = (seed, epoch)
        mixture = Mixture(self._sources(), seed, epoch, self.window)
        said = []
        for dataset, (taken, samples, start) in zip(self.datasets, mixture.contributions()):
            said.append(f"{dataset.location}: {taken:,} samples ({taken / max(len(self), 1):.1%}), "
                        f"{taken / samples:.2f} x its {samples:,}, from its own epoch {start // samples + 1}")
        logger.info("%s: epoch %d mixes %s", self.name, epoch + 1, "; ".join(said))
