"""How an epoch's order grows with the samples: time and memory of one process's order, today's against the list.

    python bench/scale.py [--samples 1e5 1e6 1e7 1e8 1e9] [--list-up-to 1e7] [--shard-samples 1000] [--world 8]
                          [--batch 64] [--plot docs/_static/scale.png] [--quality 1e6] [--check 1e9]

For each number of samples (shards of ``--shard-samples``, sizes only: no data), one process of ``--world`` builds
rank 0's share of epoch 1 and takes its first batch of indices, twice: at the epoch's start, and resumed at 90% of
the epoch (the sampler's skip, as the engine asks it). Each measurement runs in a fresh Python of its own: the
time to the first batch's indices and the process's peak RSS over what the imports left, then, computed again,
tracemalloc's peak (NumPy's and Python's allocations). ``list`` is the order as it was before (reimplemented here from
``data/streaming/order.py`` at 44af8e8: a Python list of every sample, sliced for the rank and the resume), run up
to ``--list-up-to`` samples (10^8 would take about 4 GB and half a minute a process).

``--quality`` measures what the shuffle keeps, over one epoch of that many samples in the same shards, for a full
permutation, this order at several shuffle windows and MosaicML Streaming's default ``py1e`` (reimplemented here
from its description: shard spans displaced uniformly within a block of samples, one canonical node; its default
block, 262,144, and blocks of as many shards as this order's windows of 4 and 64 read at once):
how far a sample moves from its place in the files (a fraction of the epoch), and how many shards, and how many
of 100 sources written one after the other (the first 1% of the shards from the first source, and so on), a
global batch of 256 draws from.
``--check`` runs the test's guarantees at that many samples (10^9: about 2 GB of bit arrays and minutes): every
sample once over 4 ranks in an epoch, and every remaining sample once after a resume on 3 ranks at 90%.
Figures: bench/RESULTS.md, "An epoch's order at scale".
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests"))


def shard_sizes(samples: int, per_shard: int) -> np.ndarray:
    sizes = np.full(samples // per_shard, per_shard, dtype=np.int64)
    return np.append(sizes, samples % per_shard) if samples % per_shard else sizes


def list_order(sizes, seed: int, epoch: int, window: int, run: int = 8) -> list:
    """The order as a list of every sample, as ``shard_window_order`` built it before (44af8e8)."""
    import torch

    generator = torch.Generator().manual_seed(seed + epoch)
    starts = torch.tensor([0, *sizes.tolist()]).cumsum(0).tolist()
    shards = torch.randperm(len(sizes), generator=generator).tolist()
    order = []
    for first in range(0, len(shards), window):
        runs = []
        for shard in shards[first:first + window]:
            start, end = starts[shard], starts[shard + 1]
            cut = start + int(torch.randint(run, (1,), generator=generator))
            runs += [range(start, min(cut, end))] if cut > start else []
            runs += [range(at, min(at + run, end)) for at in range(cut, end, run)]
        for index in torch.randperm(len(runs), generator=generator).tolist():
            order += runs[index]
    return order


def first_batch(kind: str, samples: int, per_shard: int, world: int, batch: int, resume: bool) -> list:
    """Rank 0's first batch of indices of epoch 1, at its start or resumed at 90%: what one process computes."""
    sizes = shard_sizes(samples, per_shard)
    skip = (samples * 9 // 10) // world if resume else 0
    if kind == "list":  # the sampler as it was: the whole order padded, then sliced for the resume and the rank
        order = list_order(sizes, seed=0, epoch=1, window=4)
        total = -(-len(order) // world) * world
        share = (order * -(-total // len(order)))[:total][skip * world:][0::world]
        return share[:batch]
    from basetrainer.data.samplers import TrainSampler
    from support.shard_index import ShardSizes

    sampler = TrainSampler(ShardSizes(sizes), num_replicas=world, rank=0, seed=0)
    sampler.set_epoch(1)
    sampler.skip(skip)
    indices = iter(sampler)
    return [next(indices) for _ in range(batch)]


def measure_one(args) -> None:
    """In a fresh process: one measurement, printed as a JSON line."""
    import torch  # noqa: F401 - what both kinds import, left out of the figures

    from basetrainer.data.samplers import TrainSampler  # noqa: F401

    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()  # timed untraced: tracemalloc slows the list's millions of allocations
    first_batch(args.kind, int(args.one), args.shard_samples, args.world, args.batch, args.resume)
    seconds = time.perf_counter() - started
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base_rss
    tracemalloc.start()
    first_batch(args.kind, int(args.one), args.shard_samples, args.world, args.batch, args.resume)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(json.dumps({"kind": args.kind, "samples": int(args.one), "resume": args.resume, "seconds": seconds,
                      "traced_mb": peak / 2**20, "rss_mb": rss / 1024}))


def measure(kind, samples, args, resume) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--one", str(samples), "--kind", kind,
               "--shard-samples", str(args.shard_samples), "--world", str(args.world), "--batch", str(args.batch)]
    done = subprocess.run(command + (["--resume"] if resume else []), capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def quality(samples: int, per_shard: int, batch: int = 256) -> list:
    """Rows of shuffle quality for the orders compared (see the module docstring)."""
    from support.shard_index import ShardSizes

    sizes = shard_sizes(samples, per_shard)
    rng = np.random.default_rng(0)
    orders = {"full permutation": rng.permutation(samples)}
    for window in (4, 16, 64):
        orders[f"shard windows, shuffle_window {window}"] = ShardSizes(sizes, window).epoch_permutation(0, 1).array()
    for block in (4 * per_shard, 64 * per_shard, 1 << 18):  # as many shards at once as windows of 4 and 64; default
        orders[f"py1e, block {block:,}"] = py1e(sizes, seed=0, epoch=1, block=block)
    shard_of = np.repeat(np.arange(len(sizes)), sizes)
    source_of = shard_of * 100 // len(sizes)
    rows = []
    for name, order in orders.items():
        usable = len(order) // batch * batch
        batches = order[:usable].reshape(-1, batch)
        rows.append({"order": name, "mean_move": float(np.abs(order - np.arange(samples)).mean() / samples),
                     "shards_per_batch": _distinct_per_row(shard_of[batches]),
                     "sources_per_batch": _distinct_per_row(source_of[batches])})
    return rows


def _distinct_per_row(values) -> float:
    ordered = np.sort(values, axis=1)
    return float((1 + (np.diff(ordered, axis=1) != 0).sum(axis=1)).mean())


def py1e(sizes, seed: int, epoch: int, block: int) -> np.ndarray:
    """MosaicML Streaming's ``py1e`` with one canonical node, from its description: the shards in a random order
    fixed for the run, their order shuffled each epoch, each shard's samples shuffled and each moved by a uniform
    offset that keeps the shard within a block of about ``block`` samples, then the samples sorted by place."""
    starts = np.concatenate([[0], np.cumsum(sizes)])
    spans = np.random.default_rng(seed).permutation(len(sizes))
    epoch_rng = np.random.default_rng(seed + epoch)
    spans = spans[epoch_rng.permutation(len(spans))]
    samples = np.concatenate([epoch_rng.permutation(np.arange(starts[s], starts[s + 1])) for s in spans])
    places, total, at = np.arange(len(samples), dtype=np.float64), len(samples), 0
    for shard in spans:
        size = int(sizes[shard])
        reach = max(0.0, (epoch_rng.integers(int(0.75 * block), int(1.25 * block)) - size) / 2)
        low, high = max(-reach, -at), min(reach, total - at - size)
        places[at:at + size] += epoch_rng.uniform(low, high, size)
        at += size
    return samples[np.argsort(places, kind="stable")]


def check(samples: int, per_shard: int) -> dict:
    """The test's guarantees (tests/data/streaming/test_order.py) at ``samples``: 4 ranks read every sample of an
    epoch once (each batch of 48 to one of 4 loader workers: whole batches, so the ranks' shares are what counts),
    and a resume on 3 ranks at 90% of the epoch reads every remaining sample once besides the padding."""
    from basetrainer.data.samplers import TrainSampler
    from support.shard_index import ShardSizes

    data, started = ShardSizes(shard_sizes(samples, per_shard)), time.perf_counter()
    seen, read = np.zeros(samples, dtype=bool), 0
    for rank in range(4):
        for ids in TrainSampler(data, 4, rank, seed=3).share().blocks():
            assert not seen[ids].any(), "a sample read twice"
            seen[ids], read = True, read + len(ids)
    assert read == samples and seen.all(), "a sample left out"
    epoch_s, done = time.perf_counter() - started, samples * 9 // 10 // 192  # global batches of 4 x 48 = 3 x 64
    seen[:] = False
    for rank in range(4):
        for ids in TrainSampler(data, 4, rank, seed=3).share()[:done * 48].blocks():
            seen[ids] = True
    remaining, repeated = np.zeros(samples, dtype=bool), 0
    for rank in range(3):
        for ids in TrainSampler(data, 3, rank, seed=3).share(skip=done * 64).blocks():
            fresh = ids[~seen[ids]]
            assert not remaining[fresh].any(), "a remaining sample read twice"
            remaining[fresh], repeated = True, repeated + len(ids) - len(fresh)
    assert (seen | remaining).all(), "a remaining sample left out"
    padding = -(-samples // 3) * 3 - samples
    assert repeated == padding, f"{repeated} samples repeated where the padding is {padding}"
    return {"samples": samples, "epoch_s": epoch_s, "resume_s": time.perf_counter() - started - epoch_s}


def plot(results, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (memory, seconds) = plt.subplots(1, 2, figsize=(10, 4))
    for kind, resume, style in (("list", False, "o--"), ("list", True, "s--"), ("views", False, "o-"),
                                ("views", True, "s-")):
        rows = [r for r in results if r["kind"] == kind and r["resume"] == resume]
        label = f"{'list (before)' if kind == 'list' else 'computed (now)'}, {'resume at 90%' if resume else 'start'}"
        memory.plot([r["samples"] for r in rows], [max(r["traced_mb"], 1e-3) for r in rows], style, label=label)
        seconds.plot([r["samples"] for r in rows], [r["seconds"] for r in rows], style, label=label)
    for axes, title in ((memory, "peak memory of the order (MB, tracemalloc)"), (seconds, "time to first batch (s)")):
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlabel("samples in the data set")
        axes.set_title(title, fontsize=10)
        axes.grid(True, which="major", alpha=0.3)
    memory.axhline(100, color="grey", linewidth=0.8)
    seconds.axhline(1, color="grey", linewidth=0.8)
    memory.legend(fontsize=8)
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=float, nargs="+", default=[1e5, 1e6, 1e7, 1e8, 1e9])
    parser.add_argument("--list-up-to", type=float, default=1e7)
    parser.add_argument("--shard-samples", type=int, default=1000)
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--plot", default=None)
    parser.add_argument("--quality", type=float, default=None)
    parser.add_argument("--check", type=float, default=None)
    parser.add_argument("--one", type=float, default=None)
    parser.add_argument("--kind", default="views")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    if args.one is not None:
        return measure_one(args)
    if args.check:
        print(check(int(args.check), args.shard_samples))
        return None
    if args.quality:
        for row in quality(int(args.quality), args.shard_samples):
            print(f"| {row['order']} | {row['mean_move']:.3f} | {row['shards_per_batch']:.1f} | "
                  f"{row['sources_per_batch']:.1f} |")
        return None
    results = []
    print("| order | samples | at | time to first batch | peak traced | peak RSS over imports |")
    for samples in (int(s) for s in args.samples):
        for kind in ("list", "views"):
            if kind == "list" and samples > args.list_up_to:
                continue
            for resume in (False, True):
                row = measure(kind, samples, args, resume)
                results.append(row)
                print(f"| {kind} | {samples:.0e} | {'90%' if resume else 'start'} | {row['seconds']:.3f} s | "
                      f"{row['traced_mb']:.1f} MB | {row['rss_mb']:.0f} MB |", flush=True)
    if args.plot:
        plot(results, args.plot)
    return None


if __name__ == "__main__":
    main()
