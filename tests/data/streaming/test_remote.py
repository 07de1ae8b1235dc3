"""Streaming shards from a real S3-compatible server (moto's, a process on a local port; no mock of the client):
the cache and its limit, a server that goes away and comes back, one that stays away, and bad remote input."""
import gc
import json
import os
import re
import subprocess
import threading
import time

import pytest

from basetrainer.data.streaming import open_shards
from basetrainer.errors import DataError
from support.shards import S3Server, numbered_shards

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return numbered_shards(tmp_path_factory.mktemp("shards") / "numbered", n=96, shard_bytes=1200)


@pytest.fixture(scope="module")
def server():
    server = S3Server().start()
    yield server
    server.stop()


@pytest.fixture()
def client_env(server, monkeypatch):
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)


def _largest(folder):
    return max(shard["bytes"] for shard in json.load(open(os.path.join(folder, "shards.json")))["shards"])


def _cache_bytes(folder):
    return sum(entry.stat().st_size for entry in os.scandir(folder) if entry.name.endswith(".bin"))


def test_every_sample_streams_through_a_cache_that_never_outgrows_its_limit(server, client_env, shards, tmp_path):
    url = server.upload(shards, "data", "limited")
    limit = 4 * _largest(shards)  # two shuffle windows of 2 shards
    data = open_shards(url, cache=tmp_path / "cache", cache_limit=limit, shuffle_window=2)
    seen, most = [], 0
    for index in data.epoch_permutation(seed=0, epoch=0):
        seen.append(int(data[index][2]))
        most = max(most, _cache_bytes(data.cache.folder))
    assert sorted(seen) == list(range(96))
    assert 0 < most <= limit


def test_a_second_reader_finds_the_shards_in_the_cache(server, client_env, shards, tmp_path):
    url = server.upload(shards, "data", "cached")
    first = open_shards(url, cache=tmp_path / "cache")
    [first[i] for i in range(len(first))]
    def shards_in(folder):
        return {entry.name: entry.stat().st_ino for entry in os.scandir(folder) if entry.name.endswith(".bin")}

    stamps = shards_in(first.cache.folder)
    second = open_shards(url, cache=tmp_path / "cache")
    assert [int(second[i][2]) for i in range(96)] == list(range(96))
    assert shards_in(second.cache.folder) == stamps  # not one downloaded again


def test_a_server_stopped_mid_epoch_and_started_again_is_waited_for_and_reading_goes_on(shards, tmp_path, monkeypatch):
    server = S3Server().start()
    try:
        for key, value in server.env.items():
            monkeypatch.setenv(key, value)
        url = server.upload(shards, "data", "restarted")
        data = open_shards(url, cache=tmp_path / "cache", retry_seconds=30, shuffle_window=1)
        order = data.epoch_permutation(seed=0, epoch=0)
        seen = [int(data[index][2]) for index in order[:30]]
        server.stop()

        def come_back():  # an outage of a second; moto keeps nothing, so the data is put back as a store keeps it
            time.sleep(1.0)
            server.start()
            server.upload(shards, "data", "restarted")

        thread = threading.Thread(target=come_back)
        thread.start()
        seen += [int(data[index][2]) for index in order[30:]]
        thread.join()
        assert sorted(seen) == list(range(96))
    finally:
        server.stop()


def test_a_server_that_stays_down_is_one_line_naming_the_url_after_the_retry_budget(shards, tmp_path, monkeypatch):
    server = S3Server().start()
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    url = server.upload(shards, "data", "gone")
    data = open_shards(url, cache=tmp_path / "cache", retry_seconds=1.5, shuffle_window=1)
    server.stop()
    started = time.monotonic()
    with pytest.raises(DataError, match=rf"cannot download {url}/chunk-0-\d+\.bin after \d+ tries in 1.5 s") as error:
        data[0]
    assert 1.5 <= time.monotonic() - started < 30 and "\n" not in str(error.value)


def test_a_url_with_no_shards_is_refused_before_any_read_naming_it(server, client_env, tmp_path):
    server.put("data", "elsewhere/readme.txt", b"not shards")
    with pytest.raises(DataError, match=r"s3://data/nothing-here holds no shards"):
        open_shards("s3://data/nothing-here", cache=tmp_path / "cache")


def test_a_remote_manifest_that_does_not_match_its_shards_names_the_shard(server, client_env, shards, tmp_path):
    url = server.upload(shards, "data", "mismatched", skip=("shards.json",))
    manifest = json.load(open(os.path.join(shards, "shards.json")))
    manifest["shards"][3]["bytes"] += 7
    server.put("data", "mismatched/shards.json", json.dumps(manifest).encode())
    with pytest.raises(DataError, match=rf"does not match the shards' index .* at shard {url}/chunk-0-3.bin"):
        open_shards(url, cache=tmp_path / "cache")


@pytest.mark.parametrize("damage, said", [(lambda data: data[:500], "500 bytes where the manifest says"),
                                          (lambda data: bytes(255 - b for b in data), "SHA-256 differs")])
def test_a_truncated_or_corrupt_remote_shard_is_refused_at_its_first_read_naming_it(server, client_env, shards,
                                                                                    tmp_path, damage, said):
    prefix = "truncated" if "bytes" in said else "corrupt"
    url = server.upload(shards, "data", prefix)
    original = open(os.path.join(shards, "chunk-0-2.bin"), "rb").read()
    server.put("data", f"{prefix}/chunk-0-2.bin", damage(original))
    data = open_shards(url, cache=tmp_path / "cache")
    first_of_shard = data.manifest.starts[2]
    with pytest.raises(DataError, match=rf"shard {url}/chunk-0-2.bin is damaged \(.*{said}"):
        data[first_of_shard]
    assert not [name for name in os.listdir(data.cache.folder) if name.startswith("chunk-0-2")]  # nothing kept


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root (CI runs as root)")
def test_a_cache_folder_on_a_full_disk_is_one_line_naming_the_folder_and_the_shard(server, client_env, shards,
                                                                                   tmp_path):
    url = server.upload(shards, "data", "full")
    disk = tmp_path / "small_disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:  # root without the right to mount (a container without CAP_SYS_ADMIN)
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        message = _first_error(open_shards(url, cache=disk))
    finally:
        gc.collect()  # litdata's reader lets go of its files in the cache
        subprocess.run(["umount", str(disk)], check=True)
    assert re.fullmatch(rf".*no space left in the cache folder {disk}/\S+ for {url}/chunk-0-\d+\.bin; .*", message)


def _first_error(data) -> str:
    """The message of the DataError that reading every sample of ``data`` raises (None if none does)."""
    try:
        for index in range(len(data)):
            data[index]
    except DataError as error:
        return str(error)
    return None
