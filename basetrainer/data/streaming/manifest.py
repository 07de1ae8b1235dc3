"""The manifest of a folder of shards, ``shards.json``: what its samples are and each shard's size and checksum.

``basetrainer shards`` writes it last, beside litdata's ``index.json`` and chunks. A reader checks, before its
first read, that the manifest and the index agree (the same shards, samples and sizes), and each shard against it
as it arrives (its size; a downloaded one also its SHA-256). A folder litdata wrote itself (``optimize``, no
manifest) is read from its index alone, without checksums.
"""
import bisect
import functools
import hashlib
import json
import os

from ...errors import DataError

FORMAT = "litdata"
VERSION = 1


class Manifest:
    """``kind`` ("images": an image folder's files and labels, "coco": images with their boxes, "dataset": the
    items of a user's dataset), ``shards`` (each ``{"file", "samples", "bytes", "sha256"}``, in sample order) and
    ``meta`` (the classes, or the categories and their COCO ids)."""

    def __init__(self, kind: str, shards: list, meta: dict):
        self.kind, self.shards, self.meta = kind, shards, meta
        self.starts = [0]
        for shard in shards:
            self.starts.append(self.starts[-1] + int(shard["samples"]))

    @property
    def samples(self) -> int:
        return self.starts[-1]

    @functools.cached_property
    def digest(self) -> str:
        """The SHA-256 of the shards' list (equal digests, the same samples in the same shards)."""
        text = json.dumps([self.kind, self.shards, self.meta], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def shard_of(self, index: int) -> int:
        """The position in ``shards`` of the shard holding sample ``index``."""
        return bisect.bisect_right(self.starts, index) - 1

    def to_json(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "kind": self.kind, "samples": self.samples,
                "meta": self.meta, "shards": self.shards}


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest_of_folder(folder: str, kind: str, meta: dict) -> Manifest:
    """The manifest of the chunks litdata wrote into ``folder`` (read from its index, each file hashed)."""
    chunks = _chunks(json.load(open(os.path.join(folder, "index.json"))), folder)
    return Manifest(kind, [{"file": chunk["filename"], "samples": chunk["chunk_size"], "bytes": chunk["chunk_bytes"],
                            "sha256": sha256_of(os.path.join(folder, chunk["filename"]))} for chunk in chunks], meta)


def read_manifest(manifest_text, index_text, where: str) -> Manifest:
    """The manifest of the shards at ``where`` from the texts of its ``shards.json`` (None: litdata's own folder)
    and ``index.json``, checked against each other: a one-line DataError naming the first shard they disagree on."""
    index = _parse(index_text, f"{where}/index.json")
    chunks = _chunks(index, where)
    if manifest_text is None:
        return Manifest("dataset", [{"file": c["filename"], "samples": c["chunk_size"], "bytes": c["chunk_bytes"],
                                     "sha256": None} for c in chunks], {})
    data = _parse(manifest_text, f"{where}/shards.json")
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("shards"), list):
        raise DataError(f"{where}/shards.json is not a manifest of basetrainer shards; write the shards again with "
                        f"basetrainer shards")
    manifest = Manifest(data.get("kind", "dataset"), data["shards"], data.get("meta") or {})
    for position in range(max(len(chunks), len(manifest.shards))):
        listed = manifest.shards[position] if position < len(manifest.shards) else None
        chunk = chunks[position] if position < len(chunks) else None
        if listed is None or chunk is None or (listed.get("file"), listed.get("samples"), listed.get("bytes")) != (
                chunk["filename"], chunk["chunk_size"], chunk["chunk_bytes"]):
            shard = (listed or {}).get("file") or chunk["filename"]
            raise DataError(f"{where}: the manifest (shards.json) does not match the shards' index (index.json) at "
                            f"shard {where}/{shard} (manifest: {_said(listed)}; index: {_said(chunk)}); write the "
                            f"shards again with basetrainer shards")
    if manifest.samples != data.get("samples", manifest.samples):
        raise DataError(f"{where}/shards.json counts {data.get('samples')} samples but its shards hold "
                        f"{manifest.samples}; write the shards again with basetrainer shards")
    return manifest


def _parse(text, where):
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError) as error:
        raise DataError(f"{where} is not valid JSON ({error}); write the shards again with basetrainer shards") \
            from None


def _chunks(index, where) -> list:
    chunks = index.get("chunks") if isinstance(index, dict) else None
    if not chunks:
        raise DataError(f"{where} holds no shards (its index.json lists none); write them with basetrainer shards")
    return chunks


def _said(entry) -> str:
    if entry is None:
        return "no such shard"
    if "filename" in entry:
        return f"{entry['filename']}, {entry['chunk_size']} samples, {entry['chunk_bytes']} bytes"
    return f"{entry.get('file')}, {entry.get('samples')} samples, {entry.get('bytes')} bytes"
