"""Writing shards (basetrainer.data.streaming.writer): deterministic bytes, a manifest, and nothing that looks
complete after an interrupted conversion."""
import hashlib
import json
import os

import pytest

from basetrainer.data.streaming import image_folder_records, is_shard_location, open_shards, write_shards
from basetrainer.errors import DataError
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
