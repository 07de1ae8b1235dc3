"""The loaders of other libraries that ``bench/input_pipeline.py`` sets beside ours, on the same files and recipe.

- ``dali``: NVIDIA DALI's CPU pipeline (``device_id=None``: no GPU): its file reader shuffling the folder,
  ``fn.decoders.image_random_crop`` (libjpeg-turbo decoding only the crop's region; DALI draws the crops itself,
  from the ImageNet recipe's area and aspect ranges), an antialiased resize and a random flip, uint8 out;
  ``workers`` is its thread count (0 and 1: one thread). Linux only: ``pip install nvidia-dali-cuda120``.
- ``spdl``: Meta's SPDL, thread-based loading: its pipeline of ``workers`` threads (0: one) reading the files
  and decoding each with FFmpeg's JPEG decoder, which crops, resizes and flips it in the same call (a filter
  per image, the crop drawn by basetrainer's RandomResizedCrop), uint8 out. ``pip install spdl``; its decoders
  need FFmpeg's shared libraries (4 to 9) on the machine.

Both yield what basetrainer's ``cpu`` decoder yields, a :class:`~basetrainer.data.images.on_device.Uint8Images`
batch and its targets, so the float work after the copy is the same for the three.
"""
import numpy as np
import torch
from torchvision import datasets

from basetrainer.data.images.crops import Recipe, sample_plan
from basetrainer.data.images.cpu_decode import read_bytes
from basetrainer.data.images.jpeg_header import jpeg_header
from basetrainer.data.images.on_device import Uint8Images

PEERS = ("dali", "spdl")


class PeerLoader:
    """``batches`` batches of ``(Uint8Images, targets)`` from ``next_batch()``, as an iterable of one epoch."""

    def __init__(self, next_batch, batches, mean, std):
        self.next_batch, self.batches, self.mean, self.std = next_batch, batches, mean, std

    def __len__(self):
        return self.batches

    def __iter__(self):
        for _ in range(self.batches):
            rows, targets = self.next_batch()  # rows: uint8 (N, H, W, 3)
            yield Uint8Images(rows.permute(0, 3, 1, 2), self.mean, self.std), targets


def dali_loader(root, size, batch_size, workers, mean, std, seed=0):
    from nvidia.dali import fn, pipeline_def, types

    count = len(datasets.ImageFolder(root).samples)

    @pipeline_def(batch_size=batch_size, num_threads=max(1, workers), device_id=None, seed=seed)
    def pipeline():
        files, labels = fn.readers.file(file_root=root, random_shuffle=True, name="files")
        images = fn.decoders.image_random_crop(files, device="cpu", output_type=types.RGB,
                                               random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3])
        images = fn.resize(images, resize_x=size, resize_y=size, antialias=True)
        return fn.flip(images, horizontal=fn.random.coin_flip()), labels

    built = pipeline()
    built.build()

    def next_batch():
        images, labels = built.run()
        rows = torch.stack([torch.from_numpy(np.asarray(images.at(i))) for i in range(len(images))])
        return rows, torch.from_numpy(np.concatenate([np.asarray(labels.at(i)) for i in range(len(labels))]))

    return PeerLoader(next_batch, count // batch_size, mean, std)


def spdl_loader(root, size, batch_size, workers, mean, std):
    import spdl.io
    from spdl.pipeline import PipelineBuilder

    samples = datasets.ImageFolder(root).samples
    order = [samples[i] for i in torch.randperm(len(samples)).tolist()]
    recipe = Recipe(size=(size, size), train=True, augmentation="imagenet", hflip=True)

    def decode(sample):
        path, target = sample
        data = bytes(read_bytes(path))
        header = jpeg_header(data)
        plan = sample_plan(recipe, header.width, header.height)
        top, left, height, width = plan.crop
        steps = f"crop={width}:{height}:{left}:{top},scale={size}:{size}:flags=bilinear,format=rgb24"
        packets = spdl.io.demux_image(data)
        frames = spdl.io.decode_packets(packets, filter_desc=steps + (",hflip" if plan.flip else ""))
        return torch.from_numpy(spdl.io.to_numpy(spdl.io.convert_frames(frames))).reshape(size, size, 3), target

    def collate(items):
        return torch.stack([rows for rows, _ in items]), torch.tensor([target for _, target in items])

    threads = max(1, workers)
    pipeline = (PipelineBuilder().add_source(order).pipe(decode, concurrency=threads)
                .aggregate(batch_size, drop_last=True).pipe(collate).add_sink(2).build(num_threads=threads))
    pipeline.start()
    batches = pipeline.get_iterator(timeout=600)

    def next_batch():
        return next(batches)

    loader = PeerLoader(next_batch, len(order) // batch_size, mean, std)
    loader.stop = pipeline.stop
    return loader


def peer_loader(pipeline, root, size, batch_size, workers, mean, std):
    """The loader of peer ``pipeline`` (one of :data:`PEERS`)."""
    if pipeline == "dali":
        return dali_loader(root, size, batch_size, workers, mean, std)
    return spdl_loader(root, size, batch_size, workers, mean, std)


def missing(pipeline):
    """Why peer ``pipeline`` cannot run here, with the pip command, or None when it can."""
    try:
        if pipeline == "dali":
            import nvidia.dali.fn  # noqa: F401
        else:
            import spdl.io

            spdl.io.demux_image  # its FFmpeg libraries are loaded here
    except (ImportError, RuntimeError, OSError) as error:
        package = {"dali": "nvidia-dali-cuda120", "spdl": "spdl"}[pipeline]
        return f"{str(error).splitlines()[0][:160]} (pip install {package})"
    return None
