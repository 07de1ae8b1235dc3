"""The classification task's image path: the decoder setting chooses what the loaders yield, the start-up line
names it, a decoder the machine cannot run is refused before any work, and configs/photo_digits.yaml trains on the
photo-like JPEGs at 224 with ImageNet's recipe."""
import logging
import os

import pytest
import torch

from basetrainer.data.images.on_device import Uint8Images
from basetrainer.errors import ConfigError
from basetrainer.tasks.classification import trainer as task
from support.images import write_class_images

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def folder(tmp_path):
    return write_class_images(str(tmp_path / "data"), ["cat", "dog"], per_class=2, size=20)


def trainer_for(folder, tmp_path, *options):
    return task.ClassificationTrainer(task.parse_config([f"train_data={folder}", f"test_data={folder}",
                                                         f"work_dir={tmp_path / 'work'}", "input_size=[16, 16]",
                                                         "batch_size=2", *options]))


def test_the_default_decoder_hands_uint8_batches_to_the_copy_and_names_itself(folder, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="basetrainer"):
        trainer = trainer_for(folder, tmp_path)
    images, _ = next(iter(trainer.train_loader))
    assert isinstance(images, Uint8Images) and images.pixels.shape == (2, 3, 16, 16)
    assert trainer.to_device((images, None))[0].dtype == torch.float32
    log = (tmp_path / "work" / "log" / "train.log").read_text()
    assert ("| decoder cpu (auto: uint8 in the loader, JPEG decoded at reduced size where the crop allows, "
            "float on the device)") in log


def test_the_pil_decoder_is_torchvisions_reference_recipe(folder, tmp_path):
    trainer = trainer_for(folder, tmp_path, "decoder=pil", "augmentation=imagenet")
    images, _ = next(iter(trainer.test_loader))
    assert images.dtype == torch.float32 and images.shape == (2, 3, 16, 16)
    names = [type(step).__name__ for step in trainer.test_loader.dataset.loader.decode.transform.transforms]
    assert names == ["Resize", "CenterCrop", "ToTensor", "Normalize"]


def test_shards_of_a_folder_are_decoded_by_the_decoder_the_start_up_line_names(folder, tmp_path):
    from basetrainer.data.streaming import image_folder_records, write_shards

    records, total, meta = image_folder_records(folder)
    write_shards(records, tmp_path / "shards", kind="images", meta=meta, total=total, progress=False)
    trainer = trainer_for(str(tmp_path / "shards"), tmp_path)
    images, _ = next(iter(trainer.train_loader))
    assert isinstance(images, Uint8Images) and images.pixels.shape == (2, 3, 16, 16)
    assert isinstance(next(iter(trainer.test_loader))[0], Uint8Images)
    log = (tmp_path / "work" / "log" / "train.log").read_text()
    assert f"data: 4 train images in {tmp_path / 'shards'}" in log and "| decoder cpu (auto: uint8" in log


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_nvjpeg_without_cuda_is_refused_in_one_line_before_any_work(folder, tmp_path):
    with pytest.raises(ConfigError, match=r"^decoder 'nvjpeg' \(from the command line\): nvjpeg decodes on the GPU, "
                                          r"and this machine has no CUDA device; use decoder: auto \(or cpu\) here$"):
        task.parse_config([f"train_data={folder}", "decoder=nvjpeg"])


def test_a_crop_scale_given_largest_first_is_refused():
    with pytest.raises(ConfigError, match=r"^crop_scale \[1, 0.5\] \(from the command line\): give the smallest "
                                          r"area first, then the largest$"):
        task.parse_config(["crop_scale=[1, 0.5]"])


def test_the_photo_digits_config_trains_at_224_with_imagenets_recipe():
    cfg = task.parse_config(["-c", os.path.join(ROOT, "configs", "photo_digits.yaml")])
    assert (cfg.train_data, cfg.test_data) == ("data/photo_digits/train", "data/photo_digits/val")
    assert cfg.input_size == [224, 224] and cfg.augmentation == "imagenet" and cfg.hflip
    assert cfg.rgb_std == [0.229, 0.224, 0.225] and cfg.decoder == "auto"


def test_the_photo_digits_are_written_where_the_config_names_their_missing_folders(tmp_path, monkeypatch):
    written = []
    monkeypatch.setattr(task, "write_photo_digits", written.append)
    monkeypatch.setattr(task, "write_digits_imagefolder", written.append)
    monkeypatch.chdir(tmp_path)
    task.prepare_data(task.parse_config(["-c", os.path.join(ROOT, "configs", "photo_digits.yaml")]))
    task.prepare_data(task.parse_config([]))
    task.prepare_data(task.parse_config([f"train_data={tmp_path}", "test_data="]))
    assert written == [os.path.join("data", "photo_digits"), os.path.join("data", "digits")]
