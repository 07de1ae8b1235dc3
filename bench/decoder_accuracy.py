"""Whether the fast decoders train to the accuracy of torchvision's reference recipe: the photo-like JPEG digits
trained through each decoder from a few seeds, the difference between decoders set against the one between seeds.

    python bench/decoder_accuracy.py [--decoders pil cpu] [--seeds 0 1] [--size 64] [--epochs 12] [-- KEY=VALUE ...]

Each run is ``examples/example.py -c configs/photo_digits.yaml decoder=D seed=S input_size=[size,size]
num_epochs=E`` (the ImageNet recipe: RandomResizedCrop, flips; ResNet-18 unless a ``net_type=`` follows ``--``),
run in turn seed by seed, and its last evaluation's accuracy is read from its history. The seed fixes the
weights' initialisation and the data order, and (the decoders drawing crops and flips from the same stream) the
augmentation; what still differs between decoders is their pixels. At 224 the ``cpu`` decoder's pixels are the
reference's within one level (tests/data/images); at small sizes it decodes the photos at 1/2 to 1/8 of their size
(libjpeg-turbo's DCT scaling) and then downscales less, the largest difference there is, so the default size here
is 64. On a GPU, ``--size 224 -- net_type=resnet50 amp=bf16 channels_last=true`` is the full-size check.
Figures: bench/RESULTS.md, "Decoders' accuracy".
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
EXAMPLE = os.path.join(REPO, "examples", "example.py")
CONFIG = os.path.join(REPO, "configs", "photo_digits.yaml")


def run_once(decoder, seed, size, epochs, extra, data, folder):
    """The last evaluation's test accuracy (%) of one run (from its history)."""
    work_dir = os.path.join(folder, f"{decoder}-{seed}")
    command = [sys.executable, EXAMPLE, "-c", CONFIG, f"decoder={decoder}", f"seed={seed}",
               f"input_size=[{size},{size}]", f"num_epochs={epochs}", "progress=false", "loggers=[csv]",
               f"work_dir={work_dir}", *extra]
    if data:
        command += [f"train_data={os.path.join(data, 'train')}", f"test_data={os.path.join(data, 'val')}"]
    result = subprocess.run(command, cwd=folder, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {result.returncode}:\n{result.stderr[-2000:]}")
    with open(os.path.join(work_dir, "log", "history.csv"), encoding="utf-8") as stream:
        rows = list(csv.DictReader(stream))
    return float(rows[-1]["test_Acc"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--decoders", nargs="+", default=["pil", "cpu"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--data", default=None, help="the photo-like digits' root (default: data/photo_digits in "
                                                     "a temporary folder, written by the first run)")
    parser.add_argument("extra", nargs="*", help="after --: more KEY=VALUE overrides for every run")
    args = parser.parse_args(argv)
    with open("/proc/loadavg", encoding="utf-8") as stream:
        load = " ".join(stream.read().split()[:3])
    print(f"size {args.size}, {args.epochs} epochs, seeds {args.seeds}, overrides {args.extra}, load average {load}")
    results = {decoder: [] for decoder in args.decoders}
    with tempfile.TemporaryDirectory() as folder:
        for seed in args.seeds:
            for decoder in args.decoders:
                accuracy = run_once(decoder, seed, args.size, args.epochs, args.extra, args.data, folder)
                results[decoder].append(accuracy)
                print(f"decoder {decoder} seed {seed}: test accuracy {accuracy:.2f}%", flush=True)
    print("\n| decoder | test accuracy per seed | mean | spread between seeds |")
    print("| --- | --- | --- | --- |")
    for decoder, values in results.items():
        print(f"| {decoder} | {', '.join(f'{value:.2f}' for value in values)} | {statistics.mean(values):.2f} | "
              f"{max(values) - min(values):.2f} |")
    means = [statistics.mean(values) for values in results.values()]
    print(f"\ndecoders' means differ by {max(means) - min(means):.2f} points; the seeds by up to "
          f"{max(max(v) - min(v) for v in results.values()):.2f}")


if __name__ == "__main__":
    main()
