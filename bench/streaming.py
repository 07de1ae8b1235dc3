"""Streaming shards against an image folder: samples/s over an epoch, and the time from a resume to the first batch.

    python bench/streaming.py [--images 4000] [--side 96] [--batch 64] [--workers 0 1 2] [--rounds 3]

Writes ``--images`` JPEG images of ``--side`` pixels in 10 classes (an ImageFolder on local disk), the same images
as shards (``basetrainer shards``' writer, 4 MB shards), and serves the shards from moto's S3-compatible server on a
local port (the ``test`` extra; left out without it). Each configuration reads one epoch through
``build_dataloader`` with the classification task's kind of training transform (decode, random resized crop to
64, flip, to tensor) and ``--workers`` loader workers: the image folder, the local shards, and the remote shards
with a cold cache (emptied before the epoch) and a warm one (filled by the epoch before). Rates are the median
of ``--rounds`` rounds, configurations in turn within a round.

Resume: the time from ``iterate_from`` at 90% of an epoch to its first batch, for the training sampler, which skips
the samples the run took (the stream's resume), against a loader whose sampler the engine cannot skip, which loads
and drops the batches before it (a replay), on the local shards and on the remote ones with a cold cache.
Figures: bench/RESULTS.md, "Streaming shards".
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, RandomSampler
from torchvision import transforms

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests"))

from basetrainer.data import CheckedImageFolder  # noqa: E402
from basetrainer.data.loaders import build_dataloader, iterate_from  # noqa: E402
from basetrainer.data.streaming import image_folder_records, open_shards, write_shards  # noqa: E402

TRANSFORM = transforms.Compose([transforms.RandomResizedCrop(64), transforms.RandomHorizontalFlip(),
                                transforms.ToTensor()])


def write_images(root, count, side):
    rng = np.random.default_rng(0)
    for index in range(count):
        folder = os.path.join(root, f"class{index % 10}")
        os.makedirs(folder, exist_ok=True)
        base = rng.integers(0, 255, (side // 8, side // 8, 3), dtype=np.uint8)  # photo-like: smooth, compressible
        pixels = np.kron(base, np.ones((8, 8, 1), dtype=np.uint8)) + rng.integers(0, 20, (side, side, 3), np.uint8)
        Image.fromarray(pixels).save(os.path.join(folder, f"{index}.jpg"), quality=90)


def epoch_rate(dataset, batch, workers) -> float:
    loader = build_dataloader(dataset, batch, workers, distributed=False, seed=0)
    started, seen = time.perf_counter(), 0
    for images, _ in loader:
        seen += len(images)
    return seen / (time.perf_counter() - started)


def first_batch_seconds(loader, start_batch) -> float:
    started = time.perf_counter()
    next(iterate_from(loader, 0, start_batch))
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=4000)
    parser.add_argument("--side", type=int, default=96)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    root = tempfile.mkdtemp(prefix="bench_streaming_")
    server = None
    try:
        write_images(os.path.join(root, "images"), args.images, args.side)
        records, total, meta = image_folder_records(os.path.join(root, "images"))
        write_shards(records, os.path.join(root, "shards"), kind="images", meta=meta, total=total,
                     shard_bytes=4 * 10**6, progress=False)
        folder = CheckedImageFolder(os.path.join(root, "images"), transform=TRANSFORM)
        local = open_shards(os.path.join(root, "shards"), transform=TRANSFORM)
        cases = {"image folder": lambda: folder, "shards, local": lambda: local}
        try:
            from support.shards import S3Server
            server = S3Server().start()
            os.environ.update(server.env)
            url = server.upload(os.path.join(root, "shards"), "bench", "shards")
            cache = os.path.join(root, "cache")

            def cold():
                shutil.rmtree(cache, ignore_errors=True)
                return open_shards(url, transform=TRANSFORM, cache=cache)

            cases["s3, cold cache"] = cold
            cases["s3, warm cache"] = lambda: open_shards(url, transform=TRANSFORM, cache=cache)
        except ImportError:
            print("moto is not installed: the remote cases are left out (pip install 'moto[server]')")
        rates = {(name, workers): [] for name in cases for workers in args.workers}
        for _ in range(args.rounds):
            for workers in args.workers:
                for name, make in cases.items():
                    rates[(name, workers)].append(epoch_rate(make(), args.batch, workers))
        print(f"{args.images} JPEG images of {args.side}x{args.side} ({_megabytes(os.path.join(root, 'images'))} MB; "
              f"shards {_megabytes(os.path.join(root, 'shards'))} MB), batch {args.batch}, load "
              f"{os.getloadavg()[0]:.1f}, median of {args.rounds} rounds\n")
        print("| data | " + " | ".join(f"{w} workers" for w in args.workers) + " |")
        print("| --- |" + " --- |" * len(args.workers))
        for name in cases:
            print(f"| {name} | " + " | ".join(f"{statistics.median(rates[(name, w)]):.0f} samples/s"
                                              for w in args.workers) + " |")
        print("\nresume at 90% of an epoch, seconds to the first batch (median):\n")
        print("| data | workers | skip ahead (training sampler) | replay (load and drop) |")
        print("| --- | --- | --- | --- |")
        resumes = {"shards, local": lambda: local}
        if "s3, cold cache" in cases:
            resumes["s3, cold cache"] = cases["s3, cold cache"]
        for name, make in resumes.items():
            for workers in sorted({0, max(args.workers)}):
                skip, replay = [], []
                for _ in range(args.rounds):
                    dataset = make()
                    loader = build_dataloader(dataset, args.batch, workers, distributed=False, seed=0)
                    start = int(0.9 * len(loader))
                    skip.append(first_batch_seconds(loader, start))
                    dataset = make()
                    plain = DataLoader(dataset, args.batch, sampler=RandomSampler(dataset), num_workers=workers,
                                       drop_last=True)
                    replay.append(first_batch_seconds(plain, start))
                print(f"| {name} | {workers} | {statistics.median(skip):.2f} s | {statistics.median(replay):.2f} s |")
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


def _megabytes(folder) -> str:
    total = sum(os.path.getsize(os.path.join(path, name)) for path, _, names in os.walk(folder) for name in names)
    return f"{total / 1e6:.1f}"


if __name__ == "__main__":
    main()
