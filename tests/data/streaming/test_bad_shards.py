"""Bad shards in a local folder, and bad streaming settings: one line naming the shard or the setting, before the
first read or at it."""
import importlib.util
import json
import os
import shutil

import pytest

from basetrainer.data.streaming import open_shards, parse_size
from basetrainer.data.streaming.position import StreamPosition
from basetrainer.errors import ConfigError, DataError
from support.shards import numbered_shards


@pytest.fixture()
def shards(tmp_path):
    return numbered_shards(tmp_path / "shards", n=60, shard_bytes=1200)


def _first_shard(folder):
    return json.load(open(os.path.join(folder, "shards.json")))["shards"][0]["file"]


def test_a_folder_without_shards_is_refused_naming_it(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"empty holds no shards"):
        open_shards(tmp_path / "empty")


def test_a_missing_folder_is_refused_naming_the_setting(tmp_path):
    with pytest.raises(ConfigError, match=r"^train_data: no such folder .*nowhere"):
        open_shards(tmp_path / "nowhere", name="train_data")


def test_a_truncated_shard_is_refused_before_the_first_read_naming_it(shards):
    name = _first_shard(shards)
    path = os.path.join(shards, name)
    open(path, "r+b").truncate(100)
    with pytest.raises(DataError, match=rf"shard .*{name} has 100 bytes where the manifest says"):
        open_shards(shards)


def test_a_missing_shard_is_refused_before_the_first_read_naming_it(shards):
    name = _first_shard(shards)
    os.remove(os.path.join(shards, name))
    with pytest.raises(DataError, match=rf"shard .*{name} is missing"):
        open_shards(shards)


def test_a_manifest_that_does_not_match_the_shards_index_names_the_shard(shards):
    path = os.path.join(shards, "shards.json")
    manifest = json.load(open(path))
    manifest["shards"][2]["samples"] += 1
    json.dump(manifest, open(path, "w"))
    shard = manifest["shards"][2]["file"]
    with pytest.raises(DataError, match=rf"does not match the shards' index .* at shard .*{shard}"):
        open_shards(shards)


def test_a_manifest_that_is_not_json_is_one_line(shards):
    open(os.path.join(shards, "shards.json"), "w").write("{not json")
    with pytest.raises(DataError, match=r"shards.json is not valid JSON"):
        open_shards(shards)


def test_a_corrupt_shard_of_the_right_size_fails_at_its_first_read_naming_it(shards):
    name = _first_shard(shards)
    path = os.path.join(shards, name)
    size = os.path.getsize(path)
    open(path, "r+b").write(b"\xff" * size)
    data = open_shards(shards)
    with pytest.raises(DataError, match=rf"cannot read sample 0 from shard .*{name}"):
        data[0]


def test_a_folder_litdata_wrote_itself_is_read_from_its_index(shards, tmp_path):
    own = tmp_path / "litdata"
    shutil.copytree(shards, own)
    os.remove(own / "shards.json")
    assert len(open_shards(own)) == 60


@pytest.mark.parametrize("text, size", [("50GB", 50 * 10**9), ("512MiB", 512 * 2**20), (1000, 1000), (None, None),
                                        ("1.5 kb", 1500)])
def test_sizes_are_read_in_decimal_and_binary_units(text, size):
    assert parse_size(text) == size


def test_a_size_that_is_no_size_names_the_setting():
    with pytest.raises(ConfigError, match=r"shards.cache_limit: '12 parsecs' is no size"):
        parse_size("12 parsecs", "shards.cache_limit")


def test_a_shuffle_window_below_one_is_refused(shards):
    with pytest.raises(ConfigError, match="shuffle_window"):
        open_shards(shards, shuffle_window=0)


def test_resuming_on_other_shards_warns_naming_what_changed(shards, tmp_path, caplog):
    saved = StreamPosition(open_shards(shards), lambda: 24).state_dict()
    other = numbered_shards(tmp_path / "other", n=72, shard_bytes=1200)
    with caplog.at_level("WARNING", logger="basetrainer"):
        StreamPosition(open_shards(other), lambda: 0).load_state_dict(saved, "last.pth")
    assert "samples 60 -> 72" in caplog.text and "after its 24 samples" in caplog.text


def test_resuming_on_the_same_shards_says_nothing(shards, caplog):
    saved = StreamPosition(open_shards(shards), lambda: 24).state_dict()
    with caplog.at_level("WARNING", logger="basetrainer"):
        StreamPosition(open_shards(shards), lambda: 0).load_state_dict(saved, "last.pth")
    assert caplog.text == ""


def test_without_litdata_opening_shards_is_one_line_naming_the_pip_command(shards, monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None if name == "litdata"
                        else real_find_spec(name, *args))
    pip = r'pip install "basetrainer\[streaming\]"$'
    with pytest.raises(ConfigError, match=rf"^streaming shards needs the litdata package: {pip}"):
        open_shards(shards)
