"""Where shards are: a local folder, or a remote URL (``s3://``, ``gs://``, ``azure://``, ``hf://``, ``r2://``) read
through a local cache; and the size a cache may grow to."""
import hashlib
import os
import re
from urllib.parse import urlparse

from ...errors import ConfigError

REMOTE_SCHEMES = ("s3", "gs", "azure", "hf", "r2")
MANIFEST = "shards.json"  # ours: the samples, the classes, each shard's size and checksum
INDEX = "index.json"  # litdata's: the chunks and how their items are laid out
DEFAULT_CACHE = os.path.join("~", ".cache", "basetrainer", "shards")

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def is_remote(text) -> bool:
    return isinstance(text, str) and urlparse(text).scheme in REMOTE_SCHEMES


def is_shard_location(text) -> bool:
    """Whether ``text`` names shards: a remote URL, or a local folder holding a manifest or litdata's index."""
    if not isinstance(text, (str, os.PathLike)) or not str(text):
        return False
    text = os.fspath(text)
    return is_remote(text) or any(os.path.isfile(os.path.join(text, name)) for name in (MANIFEST, INDEX))


class ShardLocation:
    """A shard location as the user typed it (``name`` is what messages call it, e.g. ``train_data``)."""

    def __init__(self, text, name="data"):
        text = os.fspath(text)
        self.name, self.remote = name, is_remote(text)
        self.url = text.rstrip("/") if self.remote else os.path.abspath(os.path.expanduser(text))
        if not self.remote and not os.path.isdir(self.url):
            raise ConfigError(f"{name}: no such folder {text}; give a folder of shards written by basetrainer shards, "
                              f"or a URL ({', '.join(s + '://' for s in REMOTE_SCHEMES)})")

    def file(self, filename: str) -> str:
        """The URL or path of ``filename`` in the location."""
        return f"{self.url}/{filename}" if self.remote else os.path.join(self.url, filename)

    def cache_folder(self, root) -> str:
        """This location's folder in the cache ``root`` (one per URL)."""
        key = hashlib.sha256(self.url.encode()).hexdigest()[:16]
        return os.path.join(os.path.abspath(os.path.expanduser(root or DEFAULT_CACHE)), key)

    def __str__(self):
        return self.url


def parse_size(value, name="cache_limit"):
    """Bytes from ``value``: a number of bytes, or text such as ``50GB``, ``512 MiB`` (None: no limit)."""
    if value is None or isinstance(value, int) and not isinstance(value, bool):
        return value
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]I?B|B)?\s*", str(value), re.IGNORECASE)
    if not match:
        raise ConfigError(f"{name}: {value!r} is no size; give bytes or a size such as 50GB or 512MiB")
    return int(float(match.group(1)) * _UNITS[(match.group(2) or "").upper()])
