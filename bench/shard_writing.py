"""Writing shards at scale: files per second per worker of ``basetrainer shards``, and the cost of listing an image
folder that the shards spare a run.

    python bench/shard_writing.py [--images 20000] [--workers 1 2] [--size 32] [--list-files 100000] [--dir DIR]

``--images`` small JPEGs (``--size`` pixels a side, 100 classes, made once in ``--dir`` or a temporary folder) are
written as shards by ``write_shards(image_folder_records(...), workers=N)`` for each N of ``--workers``, in a fresh
Python each: the wall time of the conversion (listing included, imports not), files per second and per second per worker, and the
CPU seconds of the writing process and of its workers (less disturbed by other jobs than the wall time). The shards
of every N are checked to be byte for byte those of the first, and the time a run takes to open them
(``open_shards``: the manifest, one entry a shard) is measured against the listing below.

``--list-files`` empty files (``cls<k>/<i>.jpg`` in 1,000 class folders, as ImageNet's training set) are listed as a
run lists its image folder (``CheckedImageFolder``, torchvision's ``ImageFolder`` scan), in a fresh Python: the wall
time, tracemalloc's peak and the RSS the listing adds. The files' names are in the kernel's cache (they were just
made): a cold listing over a network file system costs more. Figures: bench/RESULTS.md, "Writing shards".
"""
import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

CLASSES = 100


def make_images(root: str, count: int, size: int) -> None:
    import numpy as np
    from PIL import Image

    if os.path.isfile(os.path.join(root, "done")):
        return
    rng = np.random.default_rng(0)
    for index in range(count):
        folder = os.path.join(root, f"cls{index % CLASSES:03d}")
        os.makedirs(folder, exist_ok=True)
        pixels = rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(os.path.join(folder, f"{index}.jpg"), quality=90)
    open(os.path.join(root, "done"), "w").close()


def make_empty_files(root: str, count: int) -> None:
    if os.path.isfile(os.path.join(root, "done")):
        return
    for index in range(count):
        folder = os.path.join(root, f"cls{index % 1000:04d}")
        os.makedirs(folder, exist_ok=True)
        open(os.path.join(folder, f"{index}.jpg"), "w").close()
    open(os.path.join(root, "done"), "w").close()


def write(images: str, out: str, workers: int) -> dict:
    """In a fresh Python: one conversion, after a conversion of 8 images has imported what writing needs (litdata,
    pyarrow, pandas: about 2 s once a command), its time and CPU seconds."""
    from basetrainer.data.streaming import image_folder_records, open_shards, write_shards
    from basetrainer.data.streaming.records import Records

    records, total, meta = image_folder_records(images)
    write_shards(Records(records.make, records.arguments[:8]), f"{out}-warm-up", progress=False)
    before = _cpu_seconds()
    start = time.perf_counter()
    records, total, meta = image_folder_records(images)
    manifest = write_shards(records, out, kind="images", meta=meta, total=total, progress=False, workers=workers)
    seconds = time.perf_counter() - start
    after = _cpu_seconds()
    start = time.perf_counter()
    opened = len(open_shards(out))  # what a run pays instead of the listing: the manifest
    opening = time.perf_counter() - start
    assert opened == total
    return {"files": total, "seconds": seconds, "shards": len(manifest.shards), "opening": opening,
            "cpu_writer": after[0] - before[0], "cpu_workers": after[1] - before[1]}


def _cpu_seconds() -> tuple:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def listing(root: str) -> dict:
    """In a fresh Python: a run's listing of the image folder ``root``."""
    import tracemalloc

    from basetrainer.data.folder import CheckedImageFolder

    rss = _rss_mb()
    start = time.perf_counter()
    dataset = CheckedImageFolder(root)
    seconds = time.perf_counter() - start
    rss_added = _rss_mb() - rss
    tracemalloc.start()
    CheckedImageFolder(root)
    peak = tracemalloc.get_traced_memory()[1]
    return {"files": len(dataset), "seconds": seconds, "traced_mb": peak / 1e6, "rss_added_mb": rss_added}


def _rss_mb() -> float:
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def _digest(folder: str) -> str:
    hashes = hashlib.sha256()
    for name in sorted(os.listdir(folder)):
        hashes.update(name.encode() + hashlib.sha256(open(os.path.join(folder, name), "rb").read()).digest())
    return hashes.hexdigest()


def _in_fresh_python(*args) -> dict:
    result = subprocess.run([sys.executable, os.path.abspath(__file__), *map(str, args)], capture_output=True,
                            text=True, check=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    return json.loads(result.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=20000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--list-files", type=int, default=100000)
    parser.add_argument("--dir", help="where the images and files are made (and kept); default a temporary folder")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        print(json.dumps(write(rest[0], rest[1], int(rest[2])) if kind == "write" else listing(rest[0])))
        return
    with tempfile.TemporaryDirectory() as scratch:
        base = args.dir or scratch
        if args.images:
            images = os.path.join(base, f"images-{args.images}-{args.size}")
            start = time.perf_counter()
            make_images(images, args.images, args.size)
            print(f"{args.images} images of {args.size}x{args.size} ready in {time.perf_counter() - start:.0f} s")
            digests = set()
            for workers in args.workers:
                out = os.path.join(scratch, f"shards-{workers}")
                figures = _in_fresh_python("--child", "write", images, out, workers)
                digests.add(_digest(out))
                rate = figures["files"] / figures["seconds"]
                print(f"workers {workers}: {figures['files']} files in {figures['shards']} shards, "
                      f"{figures['seconds']:.1f} s, {rate:.0f} files/s, {rate / workers:.0f} files/s per worker; "
                      f"CPU: writer {figures['cpu_writer']:.1f} s, workers {figures['cpu_workers']:.1f} s; "
                      f"opening the shards: {figures['opening'] * 1000:.1f} ms")
            print("shards byte for byte the same for every number of workers:", len(digests) == 1)
        if args.list_files:
            files = os.path.join(base, f"empty-{args.list_files}")
            start = time.perf_counter()
            make_empty_files(files, args.list_files)
            print(f"{args.list_files} empty files ready in {time.perf_counter() - start:.0f} s")
            figures = _in_fresh_python("--child", "list", files)
            print(f"listing {figures['files']} files: {figures['seconds']:.2f} s, traced peak "
                  f"{figures['traced_mb']:.0f} MB, RSS added {figures['rss_added_mb']:.0f} MB")


if __name__ == "__main__":
    main()
