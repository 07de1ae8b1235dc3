"""A random crop's region decoded alone (libjpeg-turbo 3 through ctypes): the pixels of the same crop of the whole
decode, bit for bit, for baseline and progressive JPEGs, 4:2:0, 4:2:2, 4:4:4 and grey, at full size and at 1/2,
1/4 and 1/8, crops at the image's edges and across its MCUs; ``decoder: cpu`` makes the same batches with it as
without it, and leaves to the whole decode what it refuses."""
import os
import threading

import numpy as np
import pytest
import torch
from test_cpu_decode import photo_jpeg

from basetrainer.data.images.cpu_decode import DecodeOnCpu, Opened, decode, decode_crop, decode_jpeg, read_bytes
from basetrainer.data.images.crops import Plan, Recipe
from basetrainer.data.images.jpeg_region import region_decoder
from basetrainer.data.images.photo_digits import write_photo_digits

pytestmark = pytest.mark.skipif(region_decoder() is None,
                                reason='no libjpeg-turbo 3: pip install "basetrainer[region]"')

KINDS = [dict(), dict(progressive=True), dict(mode="L"), dict(subsampling="4:4:4"),
         dict(subsampling="4:4:4", progressive=True), dict(subsampling="4:2:2"), dict(mode="L", progressive=True)]
KIND_IDS = ["420", "420-progressive", "grey", "444", "444-progressive", "422", "grey-progressive"]
BOXES = [(0, 0, 67, 101), (0, 0, 1, 1), (66, 100, 1, 1), (3, 5, 17, 23), (16, 16, 16, 16), (15, 15, 18, 18),
         (31, 47, 36, 54), (7, 9, 60, 92)]


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("reduction", [1, 2, 4, 8])
def test_a_region_is_the_same_box_of_the_whole_decode(kind, reduction):
    size = (101, 67)
    data = photo_jpeg(*size, **kind)
    whole = decode_jpeg(data, size, reduction)
    rows, columns = whole.shape[:2]
    for top, left, height, width in BOXES:
        top, left = min(top // reduction, rows - 1), min(left // reduction, columns - 1)
        height, width = max(1, min(height // reduction, rows - top)), max(1, min(width // reduction, columns - left))
        region = region_decoder().decode(bytearray(data), (top, left, height, width), reduction)
        assert region.shape == (height, width, 3)
        assert np.array_equal(region, whole[top:top + height, left:left + width]), (top, left, height, width)


@pytest.mark.parametrize("size", [(500, 375), (1000, 750)], ids=["photo", "twice-a-photo"])
def test_a_plans_crop_is_the_crop_the_whole_decode_makes_at_any_reduction(size):
    data = photo_jpeg(*size)
    for crop in [(0, 0, 375, 500), (10, 20, 300, 420), (100, 200, 120, 90), (374, 499, 1, 1)]:
        plan = Plan(crop=crop, size=(36, 36), flip=True)
        crop_alone = decode_crop(region_decoder(), Opened(bytearray(data)), plan)
        whole = plan.apply(*decode(Opened(bytearray(data)), plan))
        assert torch.equal(Plan(crop=(0, 0, *crop_alone.shape[-2:]), size=(36, 36), flip=True).apply(crop_alone),
                           whole)


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """20 photo-like JPEGs of the set's size (about 450 x 350 pixels), two of each digit."""
    root = write_photo_digits(tmp_path_factory.mktemp("photos") / "photo_digits", per_class=2)
    train = os.path.join(root, "train")
    return [os.path.join(folder, name) for folder, _, names in sorted(os.walk(train)) for name in sorted(names)]


@pytest.mark.parametrize("size", [(224, 224), (32, 32)])
def test_the_cpu_decoder_makes_the_same_random_crops_with_and_without_the_region_decode(photos, size):
    recipe = Recipe(size=size, train=True, augmentation="imagenet", hflip=True)
    with_region, whole = DecodeOnCpu(recipe), DecodeOnCpu(recipe, region=False)
    assert with_region.region and not whole.region
    for seed, path in enumerate(photos):
        data = read_bytes(path)
        torch.manual_seed(seed)
        alone = with_region(data, path)
        torch.manual_seed(seed)
        assert torch.equal(alone, whole(data, path)), path


def test_a_truncated_jpeg_is_refused_and_left_to_the_whole_decode_which_says_why():
    data = photo_jpeg(101, 67)[:1500]
    assert region_decoder().decode(data, (0, 0, 10, 10)) is None
    with pytest.raises(OSError, match="image file is truncated"):
        DecodeOnCpu(Recipe(size=(16, 16), train=True, augmentation="imagenet"))(data)


def test_bytes_that_are_no_jpeg_are_refused():
    assert region_decoder().decode(b"\xff\xd8 not a jpeg at all", (0, 0, 1, 1)) is None


def test_threads_decode_at_once_each_with_its_own_handle():
    data = photo_jpeg(101, 67, progressive=True)
    expected = decode_jpeg(data, (101, 67))[5:45, 3:83]
    results = []

    def decode_many():
        results.extend(np.array_equal(region_decoder().decode(data, (5, 3, 40, 80)), expected) for _ in range(20))

    threads = [threading.Thread(target=decode_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [True] * 80


def test_the_start_up_note_names_the_region_decode():
    from basetrainer.data.images.decoders import region_said

    assert region_said() == "decoder cpu: JPEG crops decoded alone (libjpeg-turbo 3's TurboJPEG API)"
