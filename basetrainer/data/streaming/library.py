"""litdata, the library whose shard format, reader and downloaders the streaming data use (an extra).

Imported on first use only. litdata asks PyPI for a newer version of itself whenever a dataset is made
(a 30 s wait on a cluster without internet); that check is turned off before the import, as its
``LITDATA_DISABLE_VERSION_CHECK`` allows, unless the user set it.
"""
import importlib
import importlib.util
import os

from ...errors import ConfigError

PIP = 'pip install "basetrainer[streaming]"'
_S3 = {}


def litdata():
    """The ``litdata`` module; a ConfigError naming the pip command when it is not installed."""
    if importlib.util.find_spec("litdata") is None:
        raise ConfigError(f"streaming shards needs the litdata package: {PIP}")
    os.environ.setdefault("LITDATA_DISABLE_VERSION_CHECK", "1")
    return importlib.import_module("litdata")


def binary_writer(folder: str, shard_bytes: int):
    """litdata's ``BinaryWriter`` writing chunks of about ``shard_bytes`` into ``folder``."""
    litdata()
    from litdata.streaming.writer import BinaryWriter

    return BinaryWriter(folder, chunk_bytes=shard_bytes)


def local_reader(folder: str):
    """litdata's ``StreamingDataset`` over the shards of a local ``folder``, read in place."""
    return litdata().StreamingDataset(folder)


def download(url: str, path: str) -> None:
    """Fetches the object ``url`` to the local file ``path``: from S3 with boto3 (litdata's own client for S3; its
    credentials and endpoint, ``AWS_ENDPOINT_URL`` for MinIO or another S3-compatible store), else with litdata's
    downloader for the scheme (GCS, Azure, Hugging Face, R2).

    The S3 client is made here, with few retries of its own, rather than taken from litdata's ``S3Client``, which
    retries up to 1,000 times: the cache's retry budget (``shards.retry_seconds``) decides how long a server may
    be away, and litdata's chunk path (obstore) refuses an endpoint over plain http."""
    litdata()
    if url.startswith("s3://"):
        bucket, _, key = url[len("s3://"):].partition("/")
        _s3_client().download_file(bucket, key, path)
        return
    from litdata.streaming.downloader import get_downloader

    get_downloader(url.rsplit("/", 1)[0], os.path.dirname(path), []).download_file(url, path)


def _s3_client():
    key = os.getpid(), os.environ.get("AWS_ENDPOINT_URL")  # a forked loader worker makes its own
    if _S3.get("key") != key:
        import boto3
        from botocore.config import Config

        config = Config(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=5, read_timeout=60)
        _S3.update(key=key, client=boto3.client("s3", config=config))
    return _S3["client"]
