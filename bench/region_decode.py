"""Decoding a random crop's region against the whole JPEG, library by library: CPU milliseconds per image.

    python bench/region_decode.py [--per-class 20] [--size 224] [--rounds 3] [--instructions]

On the photo-like digits' training JPEGs (``per_class`` of each digit: about 450 x 350 pixels and 100 KB, as
ImageNet's photographs), with the crops basetrainer's RandomResizedCrop draws at ``--size`` from seed 0, each
file decoded to RGB ``--rounds`` times, one thread: the best round's CPU time of the process per image, and the
pixels against the reference (Pillow's whole decode, cropped): the largest and the mean absolute difference,
and how many images are the same bit for bit. A library that does not import here is a line saying so.

- simplejpeg (``decoder: cpu``'s whole decode) and imagecodecs' jpeg8 (libjpeg-turbo 3.1's libjpeg API): whole
  images; neither takes a region.
- pyvips with the libvips of pyvips-binary: whole, and ``jpegload_buffer(access="sequential").crop(...)``, which
  reads no rows below the crop.
- libjpeg-turbo 3's TurboJPEG API through ctypes (``basetrainer.data.images.jpeg_region``, the library of
  turbojpeg's wheels): whole, and ``tj3SetCroppingRegion`` with an MCU around the crop.
- PyTurboJPEG 1.x: the lossless crop transform (``TurboJPEG.crop``, to the MCU-aligned region and an MCU
  around it) on the same library, then simplejpeg decodes the smaller JPEG.
- ``decoder: cpu`` today and with the region: simplejpeg at the reduction the plan allows (1/2, 1/4, 1/8: the
  DCT scaling Pillow's ``draft`` and OpenCV's ``IMREAD_REDUCED_*`` use too), and the region at that reduction.

With ``--instructions``, what the load of a shared machine does not change: the instructions per image of
simplejpeg's whole decode and of libjpeg-turbo 3's whole and region decodes, each counted by valgrind's callgrind
in a process of its own that imports numpy and the decoder alone (no torch), less that of a process that only
reads the files.

Figures: bench/RESULTS.md, "Input pipeline" (the region table).
"""
import argparse
import glob
import importlib.metadata
import importlib.util
import io
import json
import os
import re
import resource
import subprocess
import sys
import tempfile

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from basetrainer.data.images.cpu_decode import Opened, decode, decode_crop, read_bytes  # noqa: E402
from basetrainer.data.images.crops import Recipe, sample_plan  # noqa: E402
from basetrainer.data.images.jpeg_region import region_decoder  # noqa: E402
from basetrainer.data.images.photo_digits import write_photo_digits  # noqa: E402


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def candidates():
    """``(name, decode(data, crop) -> (H, W, 3) array, region?)`` of each library that imports here; a line for
    each that does not."""
    import simplejpeg

    yield "simplejpeg 1.9, whole", lambda data, crop, plan: simplejpeg.decode_jpeg(data, colorspace="RGB"), False
    try:
        import imagecodecs
        yield (f"imagecodecs {imagecodecs.__version__} jpeg8, whole", lambda data, crop, plan:
               imagecodecs.jpeg8_decode(data), False)
    except ImportError as error:
        print(f"imagecodecs left out: {error}")
    try:
        import pyvips
        pyvips.cache_set_max(0)
        version = ".".join(str(pyvips.version(k)) for k in range(3))
        yield f"pyvips (libvips {version}), whole", lambda data, crop, plan: \
            pyvips.Image.jpegload_buffer(data).numpy(), False
        yield f"pyvips (libvips {version}), sequential + crop", lambda data, crop, plan: \
            pyvips.Image.jpegload_buffer(data, access="sequential").crop(crop[1], crop[0], crop[3], crop[2]).numpy(), \
            True
    except (ImportError, OSError) as error:
        print(f"pyvips left out: {error}")
    region = region_decoder()
    if region is None:
        print("libjpeg-turbo 3 left out: pip install basetrainer[region]")
        return

    def whole(data, crop, plan):
        header = Opened(data).size
        return region.decode(data, (0, 0, header[1], header[0]))

    yield "libjpeg-turbo 3.0 TurboJPEG (ctypes), whole", whole, False
    yield "libjpeg-turbo 3.0 TurboJPEG (ctypes), region", lambda data, crop, plan: region.decode(data, crop), True
    transform = pyturbojpeg1(region.lib._name)
    if transform is not None:
        yield "PyTurboJPEG 1.x crop transform + simplejpeg", transform, True
    yield "decoder cpu, whole at the plan's reduction", lambda data, crop, plan: \
        plan.apply(*decode(Opened(data), plan)), "plan"
    yield "decoder cpu, region at the plan's reduction", lambda data, crop, plan: \
        _as_plan(plan, decode_crop(region, Opened(data), plan)), "plan"


def _as_plan(plan, crop):
    import dataclasses

    return dataclasses.replace(plan, crop=(0, 0, *crop.shape[-2:])).apply(crop)


def pyturbojpeg1(lib_path):
    """PyTurboJPEG 1.x's lossless crop then simplejpeg's decode, or None where PyTurboJPEG 1.x is not installed (its
    module, ``turbojpeg.py``, is loaded from its file: turbojpeg's wheels own the name ``turbojpeg``)."""
    import simplejpeg

    try:
        distribution = importlib.metadata.distribution("PyTurboJPEG")
    except importlib.metadata.PackageNotFoundError:
        print("PyTurboJPEG 1.x left out: not installed")
        return None
    if not distribution.version.startswith("1."):
        print(f"PyTurboJPEG left out: {distribution.version} has no crop transform of this kind")
        return None
    path = next(str(f.locate()) for f in distribution.files if f.name == "turbojpeg.py")
    spec = importlib.util.spec_from_file_location("pyturbojpeg1", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    jpeg = module.TurboJPEG(lib_path)

    def decode_cropped(data, crop, plan):
        top, left, height, width = crop
        columns, rows = Opened(data).size
        mcu = 16  # the photos' 4:2:0
        x, y = max(0, (left // mcu - 1) * mcu), max(0, (top // mcu - 1) * mcu)
        w, h = min(columns, left + width + mcu) - x, min(rows, top + height + mcu) - y
        if x + w > columns // mcu * mcu or y + h > rows // mcu * mcu:  # the transform drops partial MCUs
            return simplejpeg.decode_jpeg(data, colorspace="RGB")[top:top + height, left:left + width]
        pixels = simplejpeg.decode_jpeg(jpeg.crop(data, x, y, w, h), colorspace="RGB")
        return pixels[top - y:top - y + height, left - x:left - x + width]

    return decode_cropped


COUNTED = {  # what each callgrind process runs on DATAS (the files' bytes) and ITEMS ((top, left, height, width, rows, columns))
    "read only": "pass",
    "simplejpeg 1.9, whole": "import simplejpeg\nfor d in DATAS: simplejpeg.decode_jpeg(d, colorspace='RGB')",
    "libjpeg-turbo 3.0 TurboJPEG (ctypes), whole":
        "for d, c in zip(DATAS, ITEMS): REGION.decode(d, (0, 0, c[4], c[5]))",
    "libjpeg-turbo 3.0 TurboJPEG (ctypes), region": "for d, c in zip(DATAS, ITEMS): REGION.decode(d, tuple(c[:4]))",
}
_PROLOGUE = """import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("jpeg_region", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
REGION = module.region_decoder()
paths, ITEMS = zip(*json.load(open(sys.argv[2])))
DATAS = [open(path, "rb").read() for path in paths]
"""


def count_instructions(paths, plans, scratch):
    """Instructions per image of each of COUNTED's decodes (callgrind), less the reading's."""
    items = os.path.join(scratch, "items.json")
    with open(items, "w", encoding="utf-8") as stream:
        json.dump([(path, [*plan.crop, *reversed(Opened(read_bytes(path)).size)]) for path, plan in zip(paths, plans)],
                  stream)
    module = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "basetrainer", "data", "images",
                          "jpeg_region.py")
    counts = {}
    for name, loop in COUNTED.items():
        done = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={scratch}/callgrind.out",
                               sys.executable, "-c", _PROLOGUE + loop, module, items],
                              capture_output=True, text=True, check=True)
        counts[name] = int(re.search(r"Collected : (\d+)", done.stderr).group(1))
    print("\n| library, how | instructions per image (millions, callgrind) |\n| --- | --- |")
    for name, count in counts.items():
        if name != "read only":
            print(f"| {name} | {(count - counts['read only']) / len(paths) / 1e6:.2f} |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-class", type=int, default=20)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--instructions", action="store_true", help="count instructions with callgrind too")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as scratch:
        root = write_photo_digits(os.path.join(scratch, "photos"), per_class=args.per_class)
        paths = sorted(glob.glob(os.path.join(root, "train", "*", "*.jpg")))
        datas = [bytes(read_bytes(path)) for path in paths]
        recipe = Recipe(size=(args.size, args.size), train=True, augmentation="imagenet", hflip=True)
        torch.manual_seed(0)
        plans = [sample_plan(recipe, *Opened(data).size) for data in datas]
        if args.instructions:
            count_instructions(paths, plans, scratch)
    references = [np.asarray(Image.open(io.BytesIO(data)).convert("RGB")) for data in datas]
    reduced = sum(plan.reduction(*Opened(data).size) > 1 for plan, data in zip(plans, datas))
    with open("/proc/loadavg", encoding="utf-8") as stream:
        load = " ".join(stream.read().split()[:3])
    print(f"{len(datas)} JPEGs, {sum(map(len, datas)) / len(datas) / 1000:.0f} KB on average, crops at "
          f"{args.size} ({reduced} decoded reduced by decoder cpu), load average {load}\n")
    print("| library, how | ms per image (CPU, best of rounds) | max difference | mean difference | "
          "same bit for bit |")
    print("| --- | --- | --- | --- | --- |")
    for name, decode_one, region in candidates():
        best = float("inf")
        for _ in range(args.rounds):
            started = cpu_seconds()
            for data, plan in zip(datas, plans):
                decode_one(data, plan.crop, plan)
            best = min(best, (cpu_seconds() - started) / len(datas) * 1000)
        largest, means, same = 0, [], 0
        for data, plan, reference in zip(datas, plans, references):
            pixels = decode_one(data, plan.crop, plan)
            top, left, height, width = plan.crop
            if region == "plan":  # against the plan applied to the reference's crop
                want = plan.apply(torch.from_numpy(reference.copy()).permute(2, 0, 1)).numpy()
                pixels = pixels.numpy()
            else:
                want = reference[top:top + height, left:left + width] if region else reference
            difference = np.abs(pixels.astype(np.int16) - want.astype(np.int16))
            largest, same = max(largest, int(difference.max())), same + (not difference.any())
            means.append(difference.mean())
        print(f"| {name} | {best:.3f} | {largest} | {np.mean(means):.4f} | {same}/{len(datas)} |", flush=True)


if __name__ == "__main__":
    main()
