"""On a GPU: ResNet-50 in bf16 trained on a folder of photograph-sized JPEGs, against the same model on batches that
are already on the GPU, with the default decoder (and the default loader workers) and with GPU decoding.

    python bench/gpu_images.py [--batch-size 256] [--max-iters 120] [--repeats 4] [--root DIR]

1. The photo-like JPEG digits, each drawn ``--repeats`` times (7,188 JPEGs of about 450 x 350 pixels and 98 KB for
   4; 5,748 to train on), written to ``--root`` (by default ``data/photo_digits_x<repeats>``) by every core.
2. Synthetic: ``torchvision.models.resnet50`` (10 classes), bf16 autocast, channels-last, SGD, on one random batch
   already on the GPU: images/s over ``--max-iters`` steps after 20, synchronised. The ceiling the data path is
   measured against.
3. The classification task, ``examples/example.py -c configs/photo_digits.yaml net_type=resnet50 amp=bf16
   channels_last=true`` with no evaluation, for ``decoder`` auto (the CPU decoder, ``num_workers: auto``) and
   nvjpeg: the closing line's images/s in steady state and the median share of each step spent waiting for data
   (its step lines' ``data N%``).

Goals (issue 53): the task within 5% of the synthetic rate, and under 10% of each step waiting for data. Exits 1
without CUDA. Figures: bench/RESULTS.md, "On one GPU".
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

import torch

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
sys.path.insert(0, REPO)

from basetrainer.data.images.photo_digits import write_photo_digits  # noqa: E402
from run_output import CLOSING_LINE  # noqa: E402 - bench/, the script's folder

EXAMPLE = os.path.join(REPO, "examples", "example.py")
CONFIG = os.path.join(REPO, "configs", "photo_digits.yaml")
STEP_LINE = re.compile(r"samples/s (\d+) data (\d+)%")


def synthetic_rate(batch_size, steps):
    """ResNet-50's images/s in bf16, channels-last, on one batch already on the GPU."""
    from torchvision import models

    device = torch.device("cuda")
    model = models.resnet50(num_classes=10).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(batch_size, 3, 224, 224, device=device).contiguous(memory_format=torch.channels_last)
    targets = torch.randint(0, 10, (batch_size,), device=device)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(images), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for _ in range(20):
        step()
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return batch_size * steps / (time.perf_counter() - started)


def task_rate(root, decoder, batch_size, steps, work_dir):
    """(steady images/s, median data-wait %) of the classification task on ``root`` with ``decoder``."""
    command = [sys.executable, EXAMPLE, "-c", CONFIG, f"train_data={os.path.join(root, 'train')}", "test_data=",
               "net_type=resnet50", "amp=bf16", "channels_last=true", f"batch_size={batch_size}",
               f"max_iters={steps}", "num_epochs=null", f"decoder={decoder}", "progress=false", "log_freq=10",
               "loggers=[csv]", f"work_dir={work_dir}"]
    result = subprocess.run(command, capture_output=True, text=True)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {result.returncode}:\n{output[-3000:]}")
    waits = [int(match.group(2)) for match in STEP_LINE.finditer(output)]
    waits = waits[1:] or waits  # the first: the workers starting
    closing = CLOSING_LINE.search(output)
    start_up = next((line for line in output.splitlines() if "loader workers per process" in line), "")
    print(f"  {decoder}: {start_up.split('| ', 1)[-1]}")
    return int(closing.group(2)) if closing else float("nan"), statistics.median(waits) if waits else float("nan")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--max-iters", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--root", default=None)
    parser.add_argument("--decoders", nargs="+", default=["auto", "nvjpeg"])
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("bench/gpu_images.py measures a GPU, and this machine has no CUDA device")
    root = args.root or os.path.join("data", f"photo_digits_x{args.repeats}")
    started = time.perf_counter()
    write_photo_digits(root, repeats=args.repeats, processes=os.cpu_count() or 1)
    print(f"{torch.cuda.get_device_name()}, {os.cpu_count()} cores; the JPEGs in {root} "
          f"({time.perf_counter() - started:.0f} s to write or find)")
    ceiling = synthetic_rate(args.batch_size, args.max_iters)
    print("| what | images/s | vs synthetic | data wait (median of the step lines) |")
    print("| --- | --- | --- | --- |")
    print(f"| synthetic batches on the GPU | {ceiling:.0f} | 1.00 | - |")
    for decoder in args.decoders:
        rate, wait = task_rate(root, decoder, args.batch_size, args.max_iters,
                               os.path.join("work_dirs", f"gpu_images_{decoder}"))
        print(f"| the task, decoder {decoder} | {rate:.0f} | {rate / ceiling:.2f} | {wait:.0f}% |", flush=True)


if __name__ == "__main__":
    main()
