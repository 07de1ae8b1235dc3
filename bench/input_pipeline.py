"""Images per second of the image-folder loaders alone (no model), then a few training steps through each.

    python bench/input_pipeline.py [--workers 0 1 2] [--rounds 2] [--size 224] [--per-class N]
                                   [--pipelines reference timm pil cpu dali spdl] [--train-steps 3] [--net resnet50]

On the same files (the photo-like JPEG digits' training split, written to ``--root``, by default a temporary
folder: 1,437 JPEGs of about 450 x 350 pixels and 98 KB), at ``--size`` with the ImageNet training recipe
(RandomResizedCrop(size, scale 0.08-1), a random flip), batches of ``--batch-size``, one epoch per measure:

- ``reference``: torchvision's reference recipe, by hand: ``ImageFolder``, ``RandomResizedCrop``,
  ``RandomHorizontalFlip``, ``ToTensor``, ``Normalize`` (Pillow decodes; floats made in the loader);
- ``timm``: timm's ``ImageDataset`` and ``create_loader`` with its ImageNet training transforms, colour jitter off
  (the same augmentation as the others; timm's default adds ColorJitter(0.4)), without its CUDA prefetcher;
- ``pil``, ``cpu``: basetrainer's decoders (``decoder: pil`` is the reference recipe through the task's code;
  ``decoder: cpu``, the default, hands uint8 to the copy, and the float conversion and normalisation follow it;
  it decodes each crop's region alone where libjpeg-turbo 3 is installed, ``pip install basetrainer[region]``);
- ``cpu-whole``: ``decoder: cpu`` decoding every JPEG whole, as without libjpeg-turbo 3;
- ``nvjpeg`` (CUDA only): the files' bytes to the GPU, decoded, cropped and normalised there (synchronised);
- ``dali``, ``spdl``: NVIDIA DALI's CPU pipeline (its own crops, decoding only their region) and Meta's SPDL
  (threads; FFmpeg decodes, crops, resizes and flips), uint8 out as ``cpu``'s: ``bench/input_peers.py``. Their
  ``workers`` are threads in the training process (0: one). Left out, with a line saying why, where their
  library does not import. FFCV is not among them: it has no wheel, and its source build needs OpenCV's and
  libjpeg-turbo's development files found through pkg-config.

For each, the loader's images/s with 0, 1 and 2 workers (the first batch left out: the workers' start), per
loading process (per worker; with 0 workers the training process itself), and per CPU-second of all its processes
(what an image costs, the figure that holds on a machine others use), every process with one thread: of the
loader alone (what feeding a GPU costs the CPU: the reference's floats are made in its loader, ``cpu``'s after the
copy, on the GPU), and with the batches finished on this machine's device (on a CPU-only machine, the CPU's work
after the copy counted too). Each round
runs every pipeline and worker count in turn, so that a machine whose load drifts treats them alike; medians,
min-max. Then ``--train-steps`` steps of ``--net`` at ``--size`` on the CPU (or the GPU there is)
through each pipeline with 0 workers and the threads basetrainer would choose: images/s of the whole step
(loading, the copy's work, forward, backward, SGD). Read the load average it prints: on a machine others use,
the rates are theirs as much as the loaders'. Figures: bench/RESULTS.md, "Input pipeline".
"""
import argparse
import os
import resource
import statistics
import sys
import tempfile
import time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, models, transforms

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from basetrainer.data.images.crops import Recipe  # noqa: E402
from basetrainer.data.images.decoders import image_folder  # noqa: E402
from basetrainer.data.images.photo_digits import write_photo_digits  # noqa: E402
from basetrainer.distributed.threads import CoreUse, set_process_threads  # noqa: E402
from basetrainer.utils.batch import move_to_device  # noqa: E402
from input_peers import PEERS, missing, peer_loader  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
PIPELINES = ("reference", "timm", "pil", "cpu", "cpu-whole", *PEERS, "nvjpeg")


def make_loader(pipeline, root, size, batch_size, workers):
    """A DataLoader of ``root`` through ``pipeline``, shuffled, dropping the last short batch."""
    common = dict(batch_size=batch_size, num_workers=workers, shuffle=True, drop_last=True)
    if pipeline == "reference":
        transform = transforms.Compose([transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(),
                                        transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
        return DataLoader(datasets.ImageFolder(root, transform=transform), **common)
    if pipeline == "timm":
        from timm.data import ImageDataset, create_loader

        return create_loader(ImageDataset(root), size, batch_size, is_training=True, color_jitter=0.0,
                             use_prefetcher=False, num_workers=workers, persistent_workers=False,
                             device=torch.device("cpu"))
    if pipeline in PEERS:
        return peer_loader(pipeline, root, size, batch_size, workers, MEAN, STD)
    recipe = Recipe(size=(size, size), train=True, augmentation="imagenet", hflip=True)
    dataset, collate = image_folder(root, recipe, pipeline.replace("-whole", ""), MEAN, STD)
    if pipeline == "cpu-whole":  # the whole JPEG decoded even where libjpeg-turbo 3 could decode the crop alone
        dataset.loader.decode.region = False
    return DataLoader(dataset, collate_fn=collate, **common)


def loader_rate(pipeline, root, size, batch_size, workers, device):
    """``(images/s, images per CPU-second, images per CPU-second of the loader alone)`` over one epoch of the
    loader, after its first batch: wall clock, and the CPU time of this process and of the workers together (the
    cost of an image, whatever else runs on the machine), then without the CPU time spent finishing the batches
    on the device (the copy, and for ``pil``, ``cpu`` and ``nvjpeg`` the work after it: float and normalisation,
    or the decode; on a GPU that work is the GPU's, on the CPU it is the training process's)."""
    loader = make_loader(pipeline, root, size, batch_size, workers)
    iterator = iter(loader)
    next(iterator)
    images, finishing, started, cpu = 0, 0.0, time.perf_counter(), _cpu_seconds()
    for batch in iterator:
        begun = time.thread_time()
        finished = move_to_device(batch, device)
        finishing += time.thread_time() - begun
        images += len(finished[0])
    if device.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - started
    del iterator  # its workers end (and are counted) here
    getattr(loader, "stop", lambda: None)()  # a peer's threads
    spent = _cpu_seconds() - cpu
    return images / wall, images / spent, images / (spent - finishing)


def _cpu_seconds() -> float:
    """User and system seconds of this process and of its finished children (the loader's workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def training_rate(pipeline, root, size, batch_size, steps, net, device):
    """Images per second of ``steps`` training steps of ``net`` through ``pipeline`` (0 workers), after one."""
    model = models.get_model(net, num_classes=10).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    iterator = iter(make_loader(pipeline, root, size, batch_size, 0))
    images, started = 0, None
    for step in range(steps + 1):
        if step == 1:
            if device.type == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
        inputs, targets = move_to_device(next(iterator), device)
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        images += len(targets) if step else 0
    if device.type == "cuda":
        torch.cuda.synchronize()
    return images / (time.perf_counter() - started)


def _runs_here(pipeline) -> bool:
    """Whether a peer's library loads here (our pipelines always do); a line says why not."""
    why = missing(pipeline) if pipeline in PEERS else None
    if why:
        print(f"{pipeline} left out: {why}")
    return why is None


def spread(values) -> str:
    return f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=None, help="where the photo-like digits are (written there if missing)")
    parser.add_argument("--per-class", type=int, default=None, help="at most this many pictures per digit")
    parser.add_argument("--pipelines", nargs="+", choices=PIPELINES, default=None)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--train-steps", type=int, default=3, help="0: no training steps")
    parser.add_argument("--train-batch-size", type=int, default=16)
    parser.add_argument("--net", default="resnet50")
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    pipelines = args.pipelines or [p for p in PIPELINES if (p != "nvjpeg" or cuda) and _runs_here(p)]
    if "nvjpeg" in pipelines and not cuda:
        raise SystemExit("--pipelines nvjpeg decodes on the GPU, and this machine has no CUDA device")
    with tempfile.TemporaryDirectory() as scratch:
        root = write_photo_digits(args.root or os.path.join(scratch, "photo_digits"), per_class=args.per_class)
        train = os.path.join(root, "train")
        with open("/proc/loadavg", encoding="utf-8") as stream:
            load = " ".join(stream.read().split()[:3])
        print(f"{len(datasets.ImageFolder(train))} JPEGs in {train}, size {args.size}, batches of "
              f"{args.batch_size}, torch threads {torch.get_num_threads()}, device {device}, load average {load}")
        torch.set_num_threads(1)  # a loader's rate per core; the workers have one thread each anyway
        rates = {(p, w): [] for p in pipelines for w in args.workers}
        for _ in range(args.rounds):
            for pipeline in pipelines:
                for workers in args.workers:
                    rates[pipeline, workers].append(loader_rate(pipeline, train, args.size, args.batch_size,
                                                                workers, device))
        print(f"\n| pipeline | workers | images/s (min-max) | per loading process | vs reference | images per "
              f"CPU-second, the loader alone | vs reference | images per CPU-second, with the work after the copy "
              f"on the {device.type} | vs reference |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for (pipeline, workers), runs in rates.items():
            walls, cpus, alone = ([run[k] for run in runs] for k in range(3))
            reference = rates.get(("reference", workers))
            ratios = ["-"] * 3
            if reference:
                ratios = [f"{statistics.median(mine) / statistics.median(r[k] for r in reference):.2f}x"
                          for k, mine in enumerate((walls, cpus, alone))]
            per_process = statistics.median(walls) / max(1, workers)
            print(f"| {pipeline} | {workers} | {spread(walls)} | {per_process:.0f} | {ratios[0]} | {spread(alone)} | "
                  f"{ratios[2]} | {spread(cpus)} | {ratios[1]} |")
        if args.train_steps:
            threads, why = set_process_threads(CoreUse())
            print(f"\ntraining with {threads} thread(s) ({why})")
            print(f"| pipeline | {args.net} training steps at {args.size}, images/s (batches of "
                  f"{args.train_batch_size}, 0 workers, {args.train_steps} steps after one) |")
            print("| --- | --- |")
            for pipeline in pipelines:
                rate = training_rate(pipeline, train, args.size, args.train_batch_size, args.train_steps, args.net,
                                     device)
                print(f"| {pipeline} | {rate:.1f} |")


if __name__ == "__main__":
    main()
