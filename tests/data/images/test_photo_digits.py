"""The photo-like JPEG digits: an ImageFolder of JPEGs with photographs' pixel sizes, drawn from a seed, written
whole or not at all."""
import os

import numpy as np
import pytest
from PIL import Image

from basetrainer.data.digits import load_digits
from basetrainer.data.images import photo_digits
from basetrainer.data.images.photo_digits import draw_photo, photo_size, write_photo_digits
from basetrainer.errors import DataError


def jpegs(root):
    return sorted(os.path.join(folder, name) for folder, _, names in os.walk(root) for name in names
                  if name.endswith(".jpg"))


@pytest.fixture(scope="module")
def small_set(tmp_path_factory):
    return write_photo_digits(tmp_path_factory.mktemp("set") / "photo_digits", per_class=1, size_factor=0.25)


def test_writes_one_folder_per_digit_in_each_split(small_set):
    for split in ("train", "val"):
        assert sorted(os.listdir(os.path.join(small_set, split))) == [str(digit) for digit in range(10)]
    files = jpegs(small_set)
    assert len(files) == 20
    with Image.open(files[0]) as image:
        assert image.format == "JPEG" and image.mode == "RGB"


def test_the_pictures_have_the_sizes_of_photographs():
    rng = np.random.default_rng(0)
    sizes = np.array([photo_size(rng) for _ in range(2000)])
    longer, shorter = sizes.max(axis=1), sizes.min(axis=1)
    assert longer.max() == 500 and longer.min() >= 300 and 430 < longer.mean() < 470
    assert 320 < shorter.mean() < 380 and (sizes[:, 0] > sizes[:, 1]).mean() > 0.6  # landscape mostly


def test_a_full_size_picture_weighs_what_a_photo_does(tmp_path):
    digits, _ = load_digits()
    draw_photo(digits[5], np.random.default_rng([0, 5])).save(tmp_path / "p.jpg", quality=90)
    assert 60_000 < os.path.getsize(tmp_path / "p.jpg") < 160_000


def test_the_same_seed_draws_the_same_picture_and_another_seed_another():
    digits, _ = load_digits()
    first = np.asarray(draw_photo(digits[0], np.random.default_rng([0, 0]), 0.25))
    again = np.asarray(draw_photo(digits[0], np.random.default_rng([0, 0]), 0.25))
    other = np.asarray(draw_photo(digits[0], np.random.default_rng([1, 0]), 0.25))
    assert np.array_equal(first, again) and (first.shape != other.shape or not np.array_equal(first, other))


def test_writing_again_keeps_the_complete_tree_and_other_settings_rewrite_it(small_set):
    path = jpegs(small_set)[0]
    before = os.stat(path).st_mtime_ns
    write_photo_digits(small_set, per_class=1, size_factor=0.25)
    assert os.stat(path).st_mtime_ns == before
    write_photo_digits(small_set, per_class=2, size_factor=0.25)
    assert len(jpegs(small_set)) == 40
    write_photo_digits(small_set, per_class=1, size_factor=0.25)
    assert len(jpegs(small_set)) == 20


def test_a_foreign_folder_is_not_overwritten(tmp_path):
    (tmp_path / "photos" / "mine").mkdir(parents=True)
    with pytest.raises(DataError, match="not a photo-digits dataset written by basetrainer"):
        write_photo_digits(tmp_path / "photos", per_class=1, size_factor=0.25)
    assert os.listdir(tmp_path / "photos") == ["mine"]


def test_the_command_writes_the_set(tmp_path, capsys):
    photo_digits.main([str(tmp_path / "p"), "--per_class", "1", "--size_factor", "0.2"])
    assert capsys.readouterr().out.strip() == str(tmp_path / "p") and len(jpegs(tmp_path / "p")) == 20


def test_repeats_draw_each_digit_again_on_other_backgrounds(tmp_path):
    root = write_photo_digits(tmp_path / "p", per_class=1, size_factor=0.2, repeats=2)
    first, again = sorted(os.listdir(os.path.join(root, "train", "0")))
    assert again == first.replace(".jpg", "_1.jpg") and len(jpegs(root)) == 40
    with Image.open(os.path.join(root, "train", "0", first)) as one, \
            Image.open(os.path.join(root, "train", "0", again)) as other:
        assert one.size != other.size or not np.array_equal(np.asarray(one), np.asarray(other))
