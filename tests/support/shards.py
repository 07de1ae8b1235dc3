"""Shards for the streaming tests: small ones written with the real writer, and a real S3-compatible server
(moto's, a process on a local port) to stream them from."""
import os
import socket
import time

import torch

from basetrainer.data.streaming import write_shards

from .processes import free_port, popen_python


class Numbered(torch.utils.data.Dataset):
    """``(x, label, index)``: 8 features around one of 4 centres, its label, and the sample's own index."""

    def __init__(self, n, seed=0):
        generator = torch.Generator().manual_seed(seed)
        self.y = torch.randint(0, 4, (n,), generator=generator)
        centres = torch.tensor([[2.0, 0], [-2.0, 0], [0, 2.0], [0, -2.0]])
        self.x = torch.cat([centres[self.y], torch.randn(n, 6, generator=generator)], 1)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, index):
        return self.x[index], self.y[index], torch.tensor(index)


def numbered_shards(folder, n=96, shard_bytes=1200, seed=0):
    """Writes ``n`` :class:`Numbered` samples as shards of about ``shard_bytes`` into ``folder``; returns it."""
    write_shards(Numbered(n, seed), folder, shard_bytes=shard_bytes, progress=False)
    return str(folder)


class S3Server:
    """moto's S3-compatible server on a free local port: ``start``, ``stop``, ``upload`` a folder; ``env`` is what a
    client needs to reach it (endpoint and dummy credentials)."""

    def __init__(self):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.env = {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing",
                    "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
        self.process = None

    def start(self):
        self.process = popen_python(["-m", "moto.server", "-p", str(self.port)], stdout=open(os.devnull, "w"),
                                    stderr=open(os.devnull, "w"))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"moto's server did not start on port {self.port}")

    def stop(self):
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="testing",
                            aws_secret_access_key="testing", region_name="us-east-1")

    def upload(self, folder, bucket, prefix, skip=()):
        """Uploads the files of ``folder`` to ``s3://bucket/prefix/`` (but ``skip``); returns that URL."""
        client = self.client()
        if bucket not in [b["Name"] for b in client.list_buckets().get("Buckets", [])]:
            client.create_bucket(Bucket=bucket)
        for name in sorted(os.listdir(folder)):
            if name not in skip:
                client.upload_file(os.path.join(folder, name), bucket, f"{prefix}/{name}")
        return f"s3://{bucket}/{prefix}"

    def put(self, bucket, key, data: bytes):
        self.client().put_object(Bucket=bucket, Key=key, Body=data)
