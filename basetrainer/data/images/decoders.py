"""The ``decoder`` setting: what turns an image folder's files into a batch, and where each step runs.

============  ====================================  ================================  =============================
decoder       decodes                               crops, resizes, flips             float, normalisation
============  ====================================  ================================  =============================
``pil``       Pillow, the whole image               ``torchvision.transforms`` on     in the loader (``ToTensor``,
                                                    Pillow images                     ``Normalize``): torchvision's
                                                                                      reference recipe
``cpu``       libjpeg-turbo, at 1/2, 1/4 or 1/8     ``transforms.v2`` on uint8, in    on the device, after the copy
              of the size where the crop allows     the loader                        of uint8 (a quarter of the
              it (:mod:`.cpu_decode`)                                                 bytes)
``nvjpeg``    the GPU, a batch at a time            on the GPU                        on the GPU
              (:mod:`.gpu_decode`)
``auto``      ``cpu``
============  ====================================  ================================  =============================

All of them draw the same crops and flips from the same random stream (:mod:`.crops`).
"""
import torch

from ...errors import ConfigError
from ..folder import CheckedImageFolder
from .on_device import CollateUint8
from .cpu_decode import DecodeOnCpu
from .gpu_decode import CollateEncoded, ReadForGpu
from .crops import Recipe
from .reference_recipe import reference_transform

DECODERS = ("auto", "cpu", "pil", "nvjpeg")


def resolve_decoder(decoder: str, device: torch.device) -> tuple:
    """``(decoder, why)``: the backend ``decoder`` means on ``device`` (``auto``: ``cpu``), and why, for the
    start-up log."""
    if decoder == "auto":
        return "cpu", ("auto: uint8 in the loader, JPEG decoded at reduced size where the crop allows, "
                       "float on the device")
    return decoder, "decoder"


def image_folder(root, recipe: Recipe, decoder: str, mean, std, *, on_bad_image="raise", name="root") -> tuple:
    """``(dataset, collate_fn)``: the :class:`~basetrainer.data.folder.CheckedImageFolder` of ``root`` whose
    samples ``decoder`` (resolved: ``pil``, ``cpu`` or ``nvjpeg``) makes under ``recipe``, normalised by ``mean`` and
    ``std``, and the ``collate_fn`` for its loader (None: torch's default). A file that is no image is found where
    it is read, and ``on_bad_image`` applies."""
    if decoder == "pil":
        dataset = CheckedImageFolder(root, transform=reference_transform(recipe, mean, std),
                                     on_bad_image=on_bad_image, name=name)
        return dataset, None
    if decoder == "cpu":
        loader, collate = DecodeOnCpu(recipe), CollateUint8(mean, std)
    elif decoder == "nvjpeg":
        loader, collate = ReadForGpu(recipe), CollateEncoded(mean, std)
    else:
        raise ConfigError(f"decoder {decoder!r} is not one of pil, cpu, nvjpeg (auto is resolved first)")
    return CheckedImageFolder(root, loader=loader, on_bad_image=on_bad_image, name=name), collate
