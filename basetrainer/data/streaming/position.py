"""The checkpoint part of a stream: which shards a run reads and how far into the epoch's order its ranks are.

Where the run goes on is the run state's (the epoch, the batch) and the data layout's (processes x batch), which
make the sampler skip the samples the ranks took: that is exact for shards as for any dataset. This part adds what
only a stream has: the identity of the shards (their manifest's digest, their location, their samples) and of the
order (the shuffle window), and the samples of the epoch taken so far. Resumed on other shards or another window,
the rest of the epoch is not the one the interrupted run would have read: a warning says so, naming both.
"""
from ...utils.log import get_logger
from .dataset import ShardDataset
from .sources import ShardMixture

logger = get_logger()


class StreamPosition:
    """The ``stream`` entries of a checkpoint for the training loader's ``dataset`` (a :class:`ShardDataset`, or a
    :class:`~.sources.ShardMixture`, whose location names its sources and weights);
    ``consumed`` returns the samples of the current epoch that all ranks together have taken."""

    def __init__(self, dataset: ShardDataset, consumed):
        self.dataset, self.consumed = dataset, consumed

    def state_dict(self) -> dict:
        dataset = self.dataset
        return {"stream": {"location": str(dataset.location), "manifest": dataset.manifest.digest,
                           "samples": len(dataset), "shuffle_window": dataset.window,
                           "samples_taken": int(self.consumed())}}

    def load_state_dict(self, saved: dict, name: str) -> None:
        stream = saved.get("stream")
        if not stream:
            return
        dataset = self.dataset
        changed = [f"{key} {stream.get(key)!r} -> {now!r}" for key, now in
                   (("location", str(dataset.location)), ("samples", len(dataset)), ("shuffle_window", dataset.window))
                   if stream.get(key) != now]
        if stream.get("manifest") != dataset.manifest.digest:
            changed.append("the shards' manifest")
        if changed:
            logger.warning("%s was written while reading other shards (%s): the rest of the epoch after its %d "
                           "samples is dealt from these shards' order, not the one the interrupted run read",
                           name, "; ".join(changed), stream.get("samples_taken", 0))


def stream_parts(loader, state, world_size: int) -> dict:
    """``{"stream": StreamPosition}`` when ``loader`` reads shards, else nothing (what the trainer hands the
    checkpoint manager)."""
    dataset = getattr(loader, "dataset", None)
    if not isinstance(dataset, (ShardDataset, ShardMixture)):
        return {}

    def consumed():
        epoch, batch = state.resume_position()
        return batch * (getattr(loader, "batch_size", None) or 1) * world_size

    return {"stream": StreamPosition(dataset, consumed)}
