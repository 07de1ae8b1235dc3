"""Writing shards (basetrainer.data.streaming.writer): deterministic bytes, a manifest, and nothing that looks
complete after an interrupted conversion."""
import hashlib
import json
import os
import signal

import pytest

from basetrainer.data.streaming import image_folder_records, is_shard_location, open_shards, write_shards
from basetrainer.errors import ConfigError, DataError
from support.images import write_class_images
from support.shards import Numbered, numbered_shards


def _digests(folder):
    return {name: hashlib.sha256(open(os.path.join(folder, name), "rb").read()).hexdigest()
            for name in sorted(os.listdir(folder))}


def test_writing_the_same_input_twice_gives_byte_for_byte_the_same_shards(tmp_path):
    first, second = numbered_shards(tmp_path / "a"), numbered_shards(tmp_path / "b")
    assert _digests(first) == _digests(second)
    assert len([name for name in os.listdir(first) if name.endswith(".bin")]) > 3  # several shards


def test_the_manifest_lists_every_shard_with_its_samples_size_and_checksum(tmp_path):
    folder = numbered_shards(tmp_path / "s", n=50)
    manifest = json.load(open(os.path.join(folder, "shards.json")))
    assert manifest["samples"] == 50 == sum(shard["samples"] for shard in manifest["shards"])
    for shard in manifest["shards"]:
        path = os.path.join(folder, shard["file"])
        assert os.path.getsize(path) == shard["bytes"]
        assert hashlib.sha256(open(path, "rb").read()).hexdigest() == shard["sha256"]


def test_an_image_folder_becomes_shards_of_its_files_with_its_classes(tmp_path):
    write_class_images(tmp_path / "images", ["cat", "dog"], per_class=5)
    records, total, meta = image_folder_records(tmp_path / "images")
    write_shards(records, tmp_path / "shards", kind="images", meta=meta, total=total, progress=False)
    data = open_shards(tmp_path / "shards")
    assert data.classes == ["cat", "dog"] and len(data) == 10
    assert sorted(data[index][1] for index in range(10)) == [0] * 5 + [1] * 5
    assert data[7][0].size == (16, 16)


def test_an_interrupted_conversion_leaves_nothing_that_reads_as_shards(tmp_path):
    def records():
        for index in range(40):
            if index == 30:
                raise KeyboardInterrupt  # the user's ^C half-way
            yield Numbered(40)[index]

    with pytest.raises(KeyboardInterrupt):
        write_shards(records(), tmp_path / "out", progress=False)
    assert not is_shard_location(tmp_path / "out") and os.listdir(tmp_path) == []


def test_a_conversion_killed_outright_is_cleaned_up_by_the_next_one(tmp_path):
    stale = tmp_path / "out.partial-12345"  # what a SIGKILL leaves: chunks, no manifest
    stale.mkdir()
    (stale / "chunk-0-0.bin").write_bytes(b"half")
    assert not is_shard_location(stale)
    numbered_shards(tmp_path / "out")
    assert sorted(os.listdir(tmp_path)) == ["out"] and is_shard_location(tmp_path / "out")


def test_an_empty_input_is_refused_and_writes_nothing(tmp_path):
    with pytest.raises(DataError, match="holds no samples"):
        write_shards([], tmp_path / "out", progress=False)
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_two_workers_write_byte_for_byte_the_shards_of_one(tmp_path):
    write_class_images(tmp_path / "images", ["cat", "dog", "fox"], per_class=40)
    for workers in (1, 2):
        records, total, meta = image_folder_records(tmp_path / "images")
        write_shards(records, tmp_path / f"images{workers}", kind="images", meta=meta, total=total, shard_bytes=4000,
                     progress=False, workers=workers)
        write_shards(Numbered(300), tmp_path / f"numbered{workers}", shard_bytes=1200, progress=False, workers=workers)
    for name in ("images", "numbered"):
        assert _digests(tmp_path / f"{name}1") == _digests(tmp_path / f"{name}2")
        assert len([file for file in os.listdir(tmp_path / f"{name}1") if file.endswith(".bin")]) > 3


@pytest.mark.slow
def test_a_bad_image_met_by_a_worker_is_one_line_naming_it_and_nothing_is_left(tmp_path):
    write_class_images(tmp_path / "images", ["cat", "dog"], per_class=40)
    (tmp_path / "images" / "dog" / "broken.png").write_bytes(b"not an image")
    records, total, meta = image_folder_records(tmp_path / "images")
    with pytest.raises(DataError, match=r"cannot read image .*broken\.png"):
        write_shards(records, tmp_path / "out", kind="images", meta=meta, total=total, progress=False, workers=2)
    assert os.listdir(tmp_path) == ["images"]


@pytest.mark.parametrize("workers", [0, -1, 1.5])
def test_workers_below_one_or_not_a_count_are_refused_before_anything_is_written(tmp_path, workers):
    with pytest.raises(ConfigError, match=r"--workers .*1 or more"):
        write_shards(Numbered(10), tmp_path / "out", progress=False, workers=workers)
    assert os.listdir(tmp_path) == []


def test_workers_need_a_map_style_dataset_not_an_iterable(tmp_path):
    with pytest.raises(ConfigError, match="needs a map-style dataset"):
        write_shards(iter(Numbered(10)), tmp_path / "out", progress=False, workers=2)
    assert os.listdir(tmp_path) == []


class _KilledAt(Numbered):
    """A dataset whose worker is killed outright (as by the kernel, out of memory) at one index."""

    def __getitem__(self, index):
        if index == 70:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().__getitem__(index)


@pytest.mark.slow
def test_a_worker_killed_outright_is_one_line_not_a_hang_and_nothing_is_left(tmp_path):
    with pytest.raises(DataError, match="a --workers process ended abruptly"):
        write_shards(_KilledAt(200), tmp_path / "out", progress=False, workers=2)
    assert os.listdir(tmp_path) == []
