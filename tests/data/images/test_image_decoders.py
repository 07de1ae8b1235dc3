"""Every decoder makes the batch the torchvision reference recipe makes (shape, dtype, range, the same crops,
pixels within a level or two), the fast ones by carrying uint8 or the files' bytes to the device; a file that is
no image is the folder's one-line error, or skipped."""
import logging
import os
import pickle
import shutil
import warnings

import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, default_collate

from basetrainer.data.images.on_device import Uint8Images
from basetrainer.data.images.decoders import image_decoder, image_folder, resolve_decoder
from basetrainer.data.images.gpu_decode import EncodedImage, EncodedImages, decode_on_device
from basetrainer.data.images.photo_digits import write_photo_digits
from basetrainer.data.images.crops import Plan, Recipe
from basetrainer.errors import DataError

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CPU = torch.device("cpu")
LEVEL = 1 / (255 * min(STD))  # one step of a uint8 pixel, normalised


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """20 photo-like JPEGs of about 225 x 170 pixels (half the set's size), two of each digit."""
    root = tmp_path_factory.mktemp("photos") / "photo_digits"
    return os.path.join(write_photo_digits(root, per_class=2, size_factor=0.5), "train")


def batch_of(root, recipe, decoder, seed=0, count=8, channels_last=False, **kwargs):
    """The first ``count`` samples of ``root`` as ``decoder`` makes them, collated and finished on the CPU."""
    dataset, collate = image_folder(root, recipe, decoder, MEAN, STD, **kwargs)
    torch.manual_seed(seed)
    images, targets = (collate or default_collate)([dataset[index] for index in range(count)])
    crossed = images
    if hasattr(images, "finish_on_device"):
        images = images.finish_on_device(CPU, channels_last)
    return images, targets, crossed


@pytest.mark.parametrize("decoder", ["cpu", "nvjpeg"])
@pytest.mark.parametrize("augmentation", ["resize_crop", "imagenet"])
@pytest.mark.parametrize("train", [True, False])
def test_a_decoder_makes_the_reference_batch_from_full_size_decodes(photos, decoder, augmentation, train):
    recipe = Recipe(size=(112, 112), train=train, augmentation=augmentation, hflip=True)
    reference, reference_targets, _ = batch_of(photos, recipe, "pil")
    images, targets, _ = batch_of(photos, recipe, decoder)
    assert images.shape == reference.shape == (8, 3, 112, 112) and images.dtype == torch.float32
    assert torch.equal(targets, reference_targets)
    difference = (images - reference).abs()
    assert difference.mean() < 0.5 * LEVEL and difference.max() <= 2.01 * LEVEL


@pytest.mark.parametrize("augmentation", ["resize_crop", "imagenet"])
def test_decoding_at_reduced_size_stays_close_to_the_reference(photos, augmentation):
    recipe = Recipe(size=(32, 32), train=True, augmentation=augmentation, hflip=True)
    reference, _, _ = batch_of(photos, recipe, "pil", count=20)
    images, _, _ = batch_of(photos, recipe, "cpu", count=20)
    assert (images - reference).abs().mean() < 6 * LEVEL  # another downscaling filter; the same picture


def test_the_cpu_decoder_hands_uint8_to_the_copy_and_floats_after_it(photos):
    recipe = Recipe(size=(64, 48), train=True)
    images, _, crossed = batch_of(photos, recipe, "cpu", channels_last=True)
    assert isinstance(crossed, Uint8Images) and crossed.pixels.dtype == torch.uint8 and len(crossed) == 8
    assert crossed.pixels.shape == (8, 3, 64, 48)
    assert images.dtype == torch.float32 and images.is_contiguous(memory_format=torch.channels_last)
    low, high = (0 - max(MEAN)) / min(STD), (1 - min(MEAN)) / min(STD)
    assert low <= images.min() and images.max() <= high


@pytest.mark.slow
def test_a_loader_worker_stacks_the_same_uint8_batch_in_shared_channels_last_memory(photos):
    dataset, collate = image_folder(photos, Recipe(size=(40, 48), train=False, augmentation="imagenet"), "cpu",
                                    MEAN, STD)
    here, crossed = (next(iter(DataLoader(dataset, batch_size=8, num_workers=workers, collate_fn=collate)))[0]
                     for workers in (0, 1))
    assert torch.equal(here.pixels, crossed.pixels) and crossed.pixels.shape == (8, 3, 40, 48)
    assert crossed.pixels.is_contiguous(memory_format=torch.channels_last)
    finished = crossed.finish_on_device(CPU)
    assert finished.is_contiguous() and torch.equal(finished, here.finish_on_device(CPU))


@pytest.mark.parametrize("decoder", ["pil", "cpu", "nvjpeg"])
def test_no_decoder_calls_what_torchvision_deprecates(photos, decoder):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # torchvision 0.29's image decoders warn so
        images, _, _ = batch_of(photos, Recipe(size=(32, 32), train=True), decoder, count=2)
    assert images.shape == (2, 3, 32, 32)


@pytest.mark.parametrize("decoder", ["pil", "cpu", "nvjpeg"])
def test_other_formats_go_through_every_decoder(tmp_path, decoder):
    for name, mode in (("a", "L"), ("b", "RGB")):
        (tmp_path / name).mkdir()
        Image.new(mode, (40, 30), 128).save(tmp_path / name / "0.png")
        Image.new("CMYK", (40, 30), (0, 0, 0, 0)).save(tmp_path / name / "1.jpg")
    images, targets, _ = batch_of(str(tmp_path), Recipe(size=(16, 16), train=False), decoder, count=4)
    assert images.shape == (4, 3, 16, 16) and targets.tolist() == [0, 0, 1, 1]


def truncated_copy(photos, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(photos, root)
    victim = sorted((root / "0").iterdir())[0]
    victim.write_bytes(victim.read_bytes()[:2000])
    return str(root), str(victim)


@pytest.mark.parametrize("decoder", ["pil", "cpu", "nvjpeg"])
def test_a_truncated_jpeg_is_the_folders_one_line_error(photos, tmp_path, decoder):
    root, victim = truncated_copy(photos, tmp_path)
    dataset, _ = image_folder(root, Recipe(size=(32, 32), train=True), decoder, MEAN, STD, name="train_data")
    with pytest.raises(DataError, match=rf"^train_data: cannot read image {victim} \(image file is truncated"):
        dataset[0]


@pytest.mark.parametrize("decoder", ["cpu", "nvjpeg"])
def test_a_truncated_jpeg_is_skipped_when_asked(photos, tmp_path, decoder, caplog):
    root, victim = truncated_copy(photos, tmp_path)
    dataset, _ = image_folder(root, Recipe(size=(32, 32), train=True), decoder, MEAN, STD, on_bad_image="skip",
                              name="train_data")
    with caplog.at_level(logging.WARNING, logger="basetrainer"):
        sample, target = dataset[0]
    assert target == 0 and f"skipping unreadable image {victim}" in caplog.text


def test_the_gpu_path_decodes_on_the_cpu_what_nvjpeg_refuses(tmp_path, caplog):
    png = tmp_path / "not-a.jpg"
    Image.new("RGB", (20, 10), (255, 0, 0)).save(png, format="PNG")
    item = EncodedImage(str(png), torch.frombuffer(bytearray(png.read_bytes()), dtype=torch.uint8),
                        Plan(crop=(0, 0, 10, 20), size=(5, 10)))
    with caplog.at_level(logging.WARNING, logger="basetrainer"):
        (pixels,) = decode_on_device([item], CPU)
    assert pixels.shape == (3, 10, 20) and pixels[0].float().mean() == 255
    assert f"decoder nvjpeg: {png} decoded on the CPU" in caplog.text
    batch = EncodedImages([item], MEAN, STD).finish_on_device(CPU)
    assert batch.shape == (1, 3, 5, 10)


def test_a_file_nothing_can_decode_on_the_device_is_an_error_naming_it(tmp_path):
    item = EncodedImage("photos/x.jpg", torch.tensor([0xFF, 0xD8, 1, 2, 3, 0xFF, 0xD9], dtype=torch.uint8),
                        Plan(crop=(0, 0, 4, 4), size=(4, 4)))
    with pytest.raises(DataError, match=r"^cannot decode image photos/x.jpg \(.*\); fix or remove the file$"):
        decode_on_device([item], CPU)


def test_auto_means_the_cpu_decoder_on_every_device():
    assert resolve_decoder("auto", CPU)[0] == "cpu" and resolve_decoder("auto", torch.device("cuda", 0))[0] == "cpu"
    assert resolve_decoder("nvjpeg", torch.device("cuda", 0)) == ("nvjpeg", "decoder")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("augmentation", ["resize_crop", "imagenet"])
def test_nvjpeg_on_the_gpu_makes_the_reference_batch(photos, augmentation):
    recipe = Recipe(size=(112, 112), train=True, augmentation=augmentation, hflip=True)
    reference, _, _ = batch_of(photos, recipe, "pil")
    dataset, collate = image_folder(photos, recipe, "nvjpeg", MEAN, STD)
    torch.manual_seed(0)
    encoded, _ = collate([dataset[index] for index in range(8)])
    images = encoded.finish_on_device(torch.device("cuda"), channels_last=True)
    assert images.device.type == "cuda" and images.is_contiguous(memory_format=torch.channels_last)
    assert (images.cpu() - reference).abs().mean() < 2 * LEVEL  # nvJPEG's IDCT and upsampling differ slightly


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_uint8_batches_are_pinned_and_finished_on_the_gpu(photos):
    dataset, collate = image_folder(photos, Recipe(size=(32, 32), train=True), "cpu", MEAN, STD)
    images, _ = collate([dataset[index] for index in range(4)])
    pinned = images.pin_memory()
    assert pinned.pixels.is_pinned()
    finished = pinned.finish_on_device(torch.device("cuda"))
    assert finished.device.type == "cuda" and finished.dtype == torch.float32


def test_a_gpu_batch_crosses_from_a_worker_as_one_block_of_bytes_and_decodes_the_same(photos):
    dataset, collate = image_folder(photos, Recipe(size=(32, 32), train=False), "nvjpeg", MEAN, STD)
    batch, _ = collate([dataset[index] for index in range(3)])
    batch.items[1].data, batch.items[1].pixels = None, torch.zeros(3, 32, 32, dtype=torch.uint8)
    packed = pickle.loads(pickle.dumps(batch))
    assert [None if item.data is None else item.data.tolist() for item in packed.items] == \
        [None if item.data is None else item.data.tolist() for item in batch.items]
    assert torch.equal(packed.finish_on_device(CPU), batch.finish_on_device(CPU))


@pytest.mark.parametrize("decoder", ["pil", "cpu", "nvjpeg"])
@pytest.mark.parametrize("train", [True, False])
def test_an_image_in_a_shard_makes_the_batch_its_file_makes_in_a_folder(photos, tmp_path, decoder, train):
    from basetrainer.data.streaming import image_folder_records, open_shards, write_shards

    records, total, meta = image_folder_records(photos)
    write_shards(records, tmp_path / "shards", kind="images", meta=meta, total=total, progress=False)
    recipe = Recipe(size=(64, 64), train=train, augmentation="imagenet", hflip=True)
    folder, collate = image_folder(photos, recipe, decoder, MEAN, STD)
    decode, _ = image_decoder(recipe, decoder, MEAN, STD)
    shards = open_shards(str(tmp_path / "shards"), decode=decode)
    names = [shards._record(index)["name"] for index in range(8)]  # the shards hold the folder's files shuffled
    in_folder = [[os.path.relpath(path, photos) for path, _ in folder.samples].index(name) for name in names]
    batches = []
    for dataset, indices in ((folder, in_folder), (shards, range(8))):
        torch.manual_seed(5)  # the same stream for both: the same crops and flips
        images, targets = (collate or default_collate)([dataset[index] for index in indices])
        batches.append((images.finish_on_device(CPU) if hasattr(images, "finish_on_device") else images, targets))
    assert torch.equal(batches[0][0], batches[1][0]) and torch.equal(batches[0][1], batches[1][1])


@pytest.mark.parametrize("decoder", ["cpu", "nvjpeg"])
def test_a_truncated_jpeg_in_a_shard_is_the_shards_one_line_error_or_skipped(photos, tmp_path, decoder, caplog):
    from basetrainer.data.streaming import open_shards, write_shards

    good = [os.path.join(photos, "0", name) for name in sorted(os.listdir(os.path.join(photos, "0")))]
    records = [{"image": open(path, "rb").read()[:2000 if index == 0 else None], "label": 0, "name": f"0/{index}.jpg"}
               for index, path in enumerate(good)]
    write_shards(records, tmp_path / "shards", kind="images", meta={"classes": ["0"]}, progress=False)
    decode, _ = image_decoder(Recipe(size=(32, 32), train=True), decoder, MEAN, STD)
    with pytest.raises(DataError, match=r"^train_data: cannot decode sample 0 \(0/0.jpg\) of shard .*image file is "
                                        r"truncated"):
        open_shards(str(tmp_path / "shards"), decode=decode, name="train_data")[0]
    skipping = open_shards(str(tmp_path / "shards"), decode=decode, on_bad_image="skip", name="train_data")
    with caplog.at_level(logging.WARNING, logger="basetrainer"):
        sample, target = skipping[0]
    assert target == 0 and "skipping sample 0 (0/0.jpg)" in caplog.text
