"""``decoder: cpu``'s decode (libjpeg-turbo through simplejpeg): the pixels Pillow decodes, whole and at 1/2, 1/4
and 1/8, for baseline and progressive JPEGs, grey ones, odd sizes and every chroma subsampling; crops at the
image's edges and across its 8- and 16-pixel blocks make what the reference recipe makes."""
import io

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms.v2 import functional as F

from basetrainer.data.images.cpu_decode import DecodeOnCpu, Opened, decode, decode_jpeg
from basetrainer.data.images.crops import Plan, Recipe


def photo_jpeg(width, height, mode="RGB", progressive=False, subsampling="4:2:0", seed=0) -> bytes:
    """A JPEG of smooth colours with grain, ``width`` x ``height``: detail in every block."""
    rng = np.random.default_rng(seed)
    field = Image.fromarray(rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)).resize((width, height), Image.BICUBIC)
    grain = rng.integers(-20, 21, (height, width, 1))
    image = Image.fromarray(np.clip(np.asarray(field, np.int16) + grain, 0, 255).astype(np.uint8)).convert(mode)
    out = io.BytesIO()
    options = {} if mode == "L" else {"subsampling": subsampling}
    image.save(out, format="JPEG", quality=90, progressive=progressive, **options)
    return out.getvalue()


def pillow_pixels(data, reduction=1) -> np.ndarray:
    image = Image.open(io.BytesIO(data))
    if reduction > 1:
        image.draft("RGB", (image.size[0] // reduction, image.size[1] // reduction))
    return np.asarray(image.convert("RGB"))


KINDS = [dict(), dict(progressive=True), dict(mode="L"), dict(mode="L", progressive=True),
         dict(subsampling="4:4:4"), dict(subsampling="4:2:2", progressive=True)]
SIZES = [(101, 67), (16, 16), (17, 9), (500, 375)]


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: "-".join(map(str, kind.values())) or "baseline")
@pytest.mark.parametrize("size", SIZES, ids=lambda size: f"{size[0]}x{size[1]}")
def test_a_jpeg_decodes_to_the_pixels_pillow_decodes(kind, size):
    data = photo_jpeg(*size, **kind)
    pixels = decode_jpeg(data, size)
    assert pixels.shape == (size[1], size[0], 3) and pixels.dtype == np.uint8
    assert np.array_equal(pixels, pillow_pixels(data))


@pytest.mark.parametrize("kind", KINDS[:3], ids=["baseline", "progressive", "grey"])
@pytest.mark.parametrize("reduction", [2, 4, 8])
def test_a_reduced_decode_is_pillows_draft_at_that_scale(kind, reduction):
    size = (101, 67)
    data = photo_jpeg(*size, **kind)
    pixels = decode_jpeg(data, size, reduction)
    assert pixels.shape == (-(-size[1] // reduction), -(-size[0] // reduction), 3)
    assert np.array_equal(pixels, pillow_pixels(data, reduction))


def reference_crop(data, plan: Plan) -> torch.Tensor:
    """The plan's crop, resize and flip on Pillow's whole decode (torchvision's antialiased resize)."""
    whole = torch.from_numpy(np.array(pillow_pixels(data))).permute(2, 0, 1)
    top, left, height, width = plan.crop
    image = F.resize(F.crop(whole, top, left, height, width), list(plan.size), antialias=True)
    return F.horizontal_flip(image) if plan.flip else image


@pytest.mark.parametrize("crop", [(0, 0, 40, 50), (27, 51, 40, 50), (0, 51, 67, 50), (3, 5, 16, 16),
                                  (8, 16, 32, 48), (9, 17, 31, 47), (66, 100, 1, 1)],
                         ids=["top-left", "bottom-right", "right-edge", "inside-a-block", "on-block-edges",
                              "across-block-edges", "last-pixel"])
@pytest.mark.parametrize("progressive", [False, True])
def test_a_crop_anywhere_makes_the_pixels_of_the_same_crop_of_the_whole_image(crop, progressive):
    data = photo_jpeg(101, 67, progressive=progressive)
    plan = Plan(crop=crop, size=(36, 36), flip=True)  # no crop 72 pixels on both sides: decoded whole
    pixels = plan.apply(*decode(Opened(bytearray(data)), plan))
    assert torch.equal(pixels, reference_crop(data, plan))


def test_the_decoder_reads_the_bytes_of_a_file_or_of_a_shard_alike():
    data = photo_jpeg(101, 67)
    recipe = Recipe(size=(32, 32), train=True, augmentation="imagenet", hflip=True)
    torch.manual_seed(3)
    from_bytes = DecodeOnCpu(recipe)(data, "a.jpg")
    torch.manual_seed(3)
    from_buffer = DecodeOnCpu(recipe)(bytearray(data), "a.jpg")
    assert from_bytes.shape == (3, 32, 32) and torch.equal(from_bytes, from_buffer)


def test_a_truncated_jpeg_is_left_to_pillow_which_says_why():
    data = photo_jpeg(101, 67)[:1500]
    with pytest.raises(OSError, match="image file is truncated"):
        DecodeOnCpu(Recipe(size=(16, 16), train=False))(data)
