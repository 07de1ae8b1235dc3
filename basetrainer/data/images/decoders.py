"""The ``decoder`` setting: what turns an image folder's files into a batch, and where each step runs.

============  ====================================  ================================  =============================
decoder       decodes                               crops, resizes, flips             float, normalisation
============  ====================================  ================================  =============================
``pil``       Pillow, the whole image               ``torchvision.transforms`` on     in the loader (``ToTensor``,
                                                    Pillow images                     ``Normalize``): torchvision's
                                                                                      reference recipe
``cpu``       libjpeg-turbo (simplejpeg), at 1/2,   ``transforms.v2`` on uint8, in    on the device, after the copy
              1/4 or 1/8 of the size where the      the loader                        of uint8 (a quarter of the
              crop allows it (:mod:`.cpu_decode`)                                     bytes)
              and a random crop's region alone
              with libjpeg-turbo 3
              (:mod:`.jpeg_region`)
``nvjpeg``    the GPU (TorchCodec's nvJPEG), a      on the GPU                        on the GPU
              batch at a time (:mod:`.gpu_decode`)
``auto``      ``cpu``
============  ====================================  ================================  =============================

All of them draw the same crops and flips from the same random stream (:mod:`.crops`). An image folder's files and
the images in shards written from one (``basetrainer shards --image-folder``) take the same path from their bytes
to the batch: :func:`image_decoder` makes a sample of an image file's bytes, :func:`image_folder` reads the files
for it, and the shards' dataset gives it each image's bytes (``open_shards(..., decode=...)``).
"""
import functools
import io

import torch
from PIL import Image

from ...errors import ConfigError
from ...utils.log import get_logger
from ..folder import CheckedImageFolder
from .cpu_decode import DecodeOnCpu, read_bytes
from .crops import Recipe
from .gpu_decode import CollateEncoded, ReadForGpu
from .jpeg_region import MISSING, region_decoder
from .on_device import CollateUint8
from .reference_recipe import reference_transform

DECODERS = ("auto", "cpu", "pil", "nvjpeg")
logger = get_logger()


def resolve_decoder(decoder: str, device: torch.device) -> tuple:
    """``(decoder, why)``: the backend ``decoder`` means on ``device`` (``auto``: ``cpu``), and why, for the
    start-up log."""
    if decoder == "auto":
        return "cpu", ("auto: uint8 in the loader, JPEG decoded at reduced size where the crop allows, "
                       "float on the device")
    return decoder, "decoder"


def region_said() -> str:
    """What ``decoder: cpu`` does with a random crop's region: decoded alone (libjpeg-turbo 3 found), or the whole
    JPEG decoded and the one-line note of what installs the region decode."""
    return ("decoder cpu: JPEG crops decoded alone (libjpeg-turbo 3's TurboJPEG API)" if region_decoder() is not None
            else f"decoder cpu: {MISSING}")


@functools.cache
def _say_region_once() -> None:
    logger.info(region_said())


def image_decoder(recipe: Recipe, decoder: str, mean, std) -> tuple:
    """``(decode, collate_fn)``: ``decode(data, name)`` makes the sample of an image file's bytes that ``decoder``
    (resolved: ``pil``, ``cpu`` or ``nvjpeg``) makes under ``recipe``, normalised by ``mean`` and ``std``
    (``name``, the file's path or the shard sample's name, is for messages); ``collate_fn`` is for its loader
    (None: torch's default). Bytes that are no image raise where they are decoded."""
    if decoder == "pil":
        return DecodeWithPillow(reference_transform(recipe, mean, std)), None
    if decoder == "cpu":
        _say_region_once()  # beside the start-up line
        return DecodeOnCpu(recipe), CollateUint8(mean, std)
    if decoder == "nvjpeg":
        return ReadForGpu(recipe), CollateEncoded(mean, std)
    raise ConfigError(f"decoder {decoder!r} is not one of pil, cpu, nvjpeg (auto is resolved first)")


def image_folder(root, recipe: Recipe, decoder: str, mean, std, *, on_bad_image="raise", name="root") -> tuple:
    """``(dataset, collate_fn)``: the :class:`~basetrainer.data.folder.CheckedImageFolder` of ``root`` whose files
    :func:`image_decoder` makes into samples, and the ``collate_fn`` for its loader (None: torch's default). A
    file that is no image is found where it is read, and ``on_bad_image`` applies."""
    decode, collate = image_decoder(recipe, decoder, mean, std)
    return CheckedImageFolder(root, loader=ReadFile(decode), on_bad_image=on_bad_image, name=name), collate


class ReadFile:
    """An image folder's loader: a file's path to ``decode(its bytes, path)``."""

    def __init__(self, decode):
        self.decode = decode

    def __call__(self, path):
        return self.decode(read_bytes(path), path)


class DecodeWithPillow:
    """``decoder: pil``: an image file's bytes opened by Pillow as RGB (what ``ImageFolder``'s loader does), then
    torchvision's reference ``transform``."""

    def __init__(self, transform):
        self.transform = transform

    def __call__(self, data, name=""):
        with Image.open(io.BytesIO(data)) as image:
            return self.transform(image.convert("RGB"))
