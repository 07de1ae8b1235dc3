"""The local cache of a remote shard location: shards fetched with litdata's downloaders, checked, kept within a
size limit, and fetched again after a server's outage within a retry budget.

One folder per location and per version of its manifest (``<cache>/<url key>/<digest>/``, holding litdata's
``index.json``, so that litdata reads it as a local folder); an older version's folder is removed when a newer one
is opened. Every process (ranks and loader workers) shares it: a shard is downloaded to a temporary file, checked
against the manifest (size and SHA-256) and renamed into place, so that a file in the folder is always whole and
right. Past ``limit`` bytes the least recently used shards are removed, never the ``keep`` most recent (those the
shuffle window reads now); a process reading a removed shard still holds it open, and the next one fetches it again.
"""
import errno
import os
import re
import shutil
import time

from ...errors import DataError
from ...utils.log import get_logger
from . import library
from .manifest import sha256_of

logger = get_logger()

FIRST_WAIT_S = 0.2  # the first wait between tries, doubled up to MAX_WAIT_S
MAX_WAIT_S = 5.0


def fetch_with_retries(url: str, path: str, budget_s: float, what: str, retry_missing: bool = False) -> None:
    """Downloads ``url`` to ``path``, trying again for ``budget_s`` seconds (a server restarting, a network
    outage); then a DataError naming ``url``. Not retried: a full disk (a DataError naming the cache folder), and
    unless ``retry_missing`` (a shard the manifest lists: a store coming back may not serve it at once) an object
    the server does not have (FileNotFoundError)."""
    deadline, wait, tries = time.monotonic() + budget_s, FIRST_WAIT_S, 0
    while True:
        tries += 1
        try:
            library.download(url, path)
            return
        except OSError as error:
            if isinstance(error, FileNotFoundError) and not retry_missing:
                raise
            if error.errno == errno.ENOSPC:
                raise DataError(f"{what}: no space left in the cache folder {os.path.dirname(path)} for {url}; free "
                                f"space there, lower shards.cache_limit or point shards.cache elsewhere") from None
            reason = error
        except Exception as error:  # noqa: BLE001 - botocore, obstore and HTTP clients fail in many ways
            if _not_found(error) and not retry_missing:
                raise FileNotFoundError(url) from None
            reason = error
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            text = str(reason).strip().splitlines()[0] if str(reason).strip() else type(reason).__name__
            raise DataError(f"{what}: cannot download {url} after {tries} tries in {budget_s:g} s ({text}); check "
                            f"that the server is up (the run resumes from its last checkpoint with resume: auto)")
        if tries == 1:
            logger.warning("%s: downloading %s failed (%s); trying again for %g s", what, url, reason, budget_s)
        time.sleep(min(wait, remaining))  # a last try at the budget's end
        wait = min(2 * wait, MAX_WAIT_S)


class ShardCache:
    """The cache folder of ``location`` for ``manifest`` under ``root``, at most ``limit`` bytes of shards (None:
    no limit), fetching for ``retry_s`` seconds before giving up; ``keep`` shards are never evicted."""

    def __init__(self, location, manifest, root, limit, retry_s: float, keep: int):
        self.location, self.manifest, self.limit, self.retry_s, self.keep = location, manifest, limit, retry_s, keep
        parent = location.cache_folder(root)
        self.folder = os.path.join(parent, manifest.digest[:16])
        largest = max(int(shard["bytes"]) for shard in manifest.shards)
        if limit is not None and limit < keep * largest:
            raise DataError(f"{location.name}: shards.cache_limit {limit} bytes cannot hold the {keep} shards that "
                            f"the ranks read at once across a shuffle window's end ({largest} bytes the largest); "
                            f"raise it to at least {keep * largest}, or lower shards.shuffle_window")
        try:
            os.makedirs(self.folder, exist_ok=True)
            free = shutil.disk_usage(self.folder).free
        except OSError as error:
            raise DataError(f"{location.name}: cannot use the cache folder {self.folder} ({error.strerror}); point "
                            f"shards.cache at a writable folder") from None
        if free < largest:
            raise DataError(f"{location.name}: the cache folder {self.folder} has {free} bytes free, less than one "
                            f"shard ({largest} bytes); free space there or point shards.cache elsewhere")
        for other in os.listdir(parent):  # an older version of the same location's shards
            if other != os.path.basename(self.folder) and re.fullmatch("[0-9a-f]{16}", other):
                shutil.rmtree(os.path.join(parent, other), ignore_errors=True)

    def put_text(self, filename: str, text: bytes) -> None:
        """Writes a small file of the location (its index) into the folder, whole or not at all."""
        path = os.path.join(self.folder, filename)
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "wb") as file:
            file.write(text)
        os.replace(temporary, path)

    def fetch(self, position: int) -> str:
        """The local path of the manifest's shard ``position``: from the folder, or downloaded, checked and kept."""
        shard = self.manifest.shards[position]
        path = os.path.join(self.folder, shard["file"])
        if os.path.isfile(path):
            os.utime(path)  # recently used: evicted last
            return path
        url = self.location.file(shard["file"])
        temporary = f"{path}.{os.getpid()}.tmp"
        try:
            fetch_with_retries(url, temporary, self.retry_s, self.location.name, retry_missing=True)
            problem = _problem(temporary, shard)
            if problem:
                raise DataError(f"{self.location.name}: shard {url} is damaged ({problem}); write the shards "
                                f"again with basetrainer shards, or restore the file")
            os.replace(temporary, path)
        finally:
            if os.path.exists(temporary):
                os.remove(temporary)
        self._evict()
        return path

    def _evict(self) -> None:
        if self.limit is None:
            return
        names = {shard["file"] for shard in self.manifest.shards}
        files = []
        for entry in os.scandir(self.folder):
            if entry.name in names:
                try:
                    stat = entry.stat()
                except FileNotFoundError:  # another process evicted it
                    continue
                files.append((stat.st_mtime, stat.st_size, entry.path))
        files.sort()
        total = sum(size for _, size, _ in files)
        for _, size, path in files[:max(0, len(files) - self.keep)]:
            if total <= self.limit:
                break
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
            total -= size


def _not_found(error) -> bool:
    """Whether a download failed because the server has no such object (or bucket)."""
    code = (getattr(error, "response", None) or {}).get("Error", {}).get("Code")
    return code in ("404", "NoSuchKey", "NoSuchBucket") or "404" in type(error).__name__


def _problem(path: str, shard: dict):
    """What is wrong with the file ``path`` of ``shard`` (its size, its checksum), or None."""
    size = os.path.getsize(path)
    if size != int(shard["bytes"]):
        return f"{size} bytes where the manifest says {shard['bytes']}: truncated or replaced"
    if shard.get("sha256") and sha256_of(path) != shard["sha256"]:
        return "its SHA-256 differs from the manifest's: corrupt or replaced"
    return None
