"""The bundled handwritten digits written as an ImageFolder tree, and the checked ImageFolder's errors."""
import logging
import os

import numpy as np
import pytest
import torch
from PIL import Image

from basetrainer.data import CheckedImageFolder, check_same_classes, digits, load_digits, split_indices
from basetrainer.data.digits import write_digits_imagefolder
from basetrainer.errors import DataError


@pytest.fixture(scope="module")
def digits_root(tmp_path_factory):
    return write_digits_imagefolder(tmp_path_factory.mktemp("data") / "digits")


def png_files(folder):
    return sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, files in os.walk(folder)
                  for f in files if f.endswith(".png"))


# ---------------------------------------------------------------------- the digits


def test_bundled_digits_are_1797_images_of_10_classes():
    images, labels = load_digits()
    assert images.shape == (1797, 8, 8) and images.max() == 16
    assert sorted(np.unique(labels)) == list(range(10))


def test_tree_holds_every_image_once_in_train_or_val(digits_root):
    train, val = png_files(os.path.join(digits_root, "train")), png_files(os.path.join(digits_root, "val"))
    assert len(train) + len(val) == 1797
    assert sorted(os.listdir(os.path.join(digits_root, "train"))) == [str(d) for d in range(10)]
    assert sorted(os.listdir(os.path.join(digits_root, "val"))) == [str(d) for d in range(10)]
    assert not {os.path.basename(p) for p in train} & {os.path.basename(p) for p in val}


def test_split_is_stratified_with_a_fifth_of_each_class_in_val(digits_root):
    _, labels = load_digits()
    for digit in range(10):
        in_val = len(os.listdir(os.path.join(digits_root, "val", str(digit))))
        assert in_val == round(0.2 * np.sum(labels == digit))


def test_split_is_fixed_by_the_seed():
    _, labels = load_digits()
    first, again = split_indices(labels, 0.2, seed=0), split_indices(labels, 0.2, seed=0)
    other = split_indices(labels, 0.2, seed=1)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not np.array_equal(first[1], other[1])
    assert first[1][:5].tolist() == [7, 15, 18, 20, 25]  # the same split on every machine


def test_files_are_named_by_their_row_and_filed_under_their_label(digits_root):
    _, labels = load_digits()
    for path in png_files(os.path.join(digits_root, "val"))[:50]:
        folder, name = os.path.split(path)
        assert labels[int(name[:-4])] == int(folder)


def test_pngs_decode_as_upscaled_greyscale_digits(digits_root):
    images, _ = load_digits()
    image = Image.open(os.path.join(digits_root, "train", "0", "0000.png"))
    assert image.size == (32, 32) and image.mode == "L"
    small = np.asarray(image.resize((8, 8), Image.BOX), dtype=float) / 255 * 16
    assert np.abs(small - images[0]).mean() < 1.5  # the same picture, only bigger


def test_writing_again_keeps_the_complete_tree(digits_root):
    path = os.path.join(digits_root, "train", "0", "0000.png")
    before = os.stat(path).st_mtime_ns
    write_digits_imagefolder(digits_root)
    assert os.stat(path).st_mtime_ns == before


def test_an_incomplete_tree_is_detected_and_rewritten(tmp_path):
    root = write_digits_imagefolder(tmp_path / "digits")
    os.remove(os.path.join(root, "val", "3", os.listdir(os.path.join(root, "val", "3"))[0]))
    assert not digits.is_complete(root)
    write_digits_imagefolder(root)
    assert digits.is_complete(root) and len(png_files(root)) == 1797


def test_an_interrupted_write_leaves_no_tree_behind(tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(digits, "_move_into_place", fail)
    with pytest.raises(KeyboardInterrupt):
        write_digits_imagefolder(tmp_path / "digits")
    assert os.listdir(tmp_path) == []


def test_a_foreign_folder_is_not_overwritten(tmp_path):
    (tmp_path / "digits" / "mine").mkdir(parents=True)
    with pytest.raises(DataError, match="not a digits dataset written by basetrainer"):
        write_digits_imagefolder(tmp_path / "digits")
    assert os.listdir(tmp_path / "digits") == ["mine"]


# ---------------------------------------------------------------------- the checked ImageFolder


def write_images(root, classes=("a", "b"), per_class=2):
    for name in classes:
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(per_class):
            Image.new("RGB", (8, 8), (40 * i, 0, 0)).save(os.path.join(root, name, f"{i}.png"))
    return str(root)


def test_loads_an_image_folder(tmp_path):
    dataset = CheckedImageFolder(write_images(tmp_path / "train"))
    image, target = dataset[3]
    assert dataset.classes == ["a", "b"] and len(dataset) == 4 and target == 1 and image.size == (8, 8)


def test_missing_folder_names_the_key_and_the_fix(tmp_path):
    with pytest.raises(DataError) as error:
        CheckedImageFolder(tmp_path / "nowhere", name="train_data")
    assert str(error.value) == (f"train_data: no such folder {tmp_path / 'nowhere'}; point train_data at an "
                                f"ImageFolder tree (one sub-folder per class)")


def test_folder_without_class_folders_is_an_error(tmp_path):
    Image.new("RGB", (8, 8)).save(tmp_path / "loose.png")
    with pytest.raises(DataError, match="has no class folders; put the images in one sub-folder per class"):
        CheckedImageFolder(tmp_path, name="train_data")


def test_class_folder_without_images_is_named(tmp_path):
    root = write_images(tmp_path / "train")
    os.makedirs(os.path.join(root, "c"))
    with pytest.raises(DataError, match=r"class folder .*train/c holds no images .*add images or remove the folder"):
        CheckedImageFolder(root, name="train_data")


def corrupt(root):
    path = os.path.join(root, "a", "1.png")
    with open(path, "wb") as stream:
        stream.write(b"not a png")
    return path


def test_unreadable_image_raises_naming_the_file(tmp_path):
    root = write_images(tmp_path / "train")
    path = corrupt(root)
    dataset = CheckedImageFolder(root, name="train_data", on_bad_image="raise")
    with pytest.raises(DataError, match=f"train_data: cannot read image {path} .*set on_bad_image: skip"):
        dataset[1]


def test_unreadable_image_is_skipped_with_one_warning(tmp_path):
    root = write_images(tmp_path / "train")
    path = corrupt(root)
    dataset = CheckedImageFolder(root, name="train_data", on_bad_image="skip")
    records = Records(level=logging.WARNING)
    logging.getLogger("basetrainer").addHandler(records)  # conftest's restore_basetrainer_logger removes it
    first, again = dataset[1], dataset[1]
    assert first[1] == again[1] == 1  # the next sample, of class b
    warnings = [r.getMessage() for r in records.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and path in warnings[0]


class Records(logging.Handler):
    """Keeps the records the "basetrainer" logger hands it, whatever the root logger's handlers are."""

    def __init__(self, level):
        super().__init__(level)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def test_train_and_test_classes_must_agree(tmp_path):
    train = CheckedImageFolder(write_images(tmp_path / "train", ("a", "b", "c")))
    test = CheckedImageFolder(write_images(tmp_path / "val", ("a", "b", "d")))
    with pytest.raises(DataError, match=r"only in train_data: \['c'\]; only in test_data: \['d'\]"):
        check_same_classes(train, test)


def test_evaluation_loaders_keep_their_workers_and_training_loaders_start_them_each_epoch():
    from torch.utils.data import TensorDataset

    from basetrainer.data import build_dataloader

    data = TensorDataset(torch.arange(32.0))
    assert build_dataloader(data, 8, num_workers=2, phase="test", shuffle=False).persistent_workers
    assert not build_dataloader(data, 8, num_workers=2, phase="train").persistent_workers
    assert build_dataloader(data, 8, num_workers=2, phase="train", persistent_workers=True).persistent_workers
    assert not build_dataloader(data, 8, num_workers=0, phase="test").persistent_workers
