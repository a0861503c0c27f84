"""A real S3-compatible server for the tests: moto's server mode, a separate process.

Nothing is mocked: the server is ``python -m moto.server`` listening on a
free port of 127.0.0.1, and clients (zarr over its own ``ObjectStore`` on
obstore, obstore, icechunk, boto3) reach it over HTTP exactly as they reach a
cloud endpoint, through the standard environment variables only. Each
pytest-xdist worker starts its own server; each test gets a bucket of its own.

Fixtures:

* ``s3_server``: the running :class:`S3Server` (session scope);
* ``s3_bucket``: a fresh bucket's URL (``s3://jask-test-N``), with the
  server's environment variables set for the test.

:func:`zarr_store` is how another tool (plain zarr, xarray, dask) reaches a URL
in these tests: zarr-python's ``ObjectStore`` on an obstore client of its own,
configured by the environment alone, never through jask.

A test may :meth:`S3Server.kill` the server mid-op and :meth:`S3Server.start`
it again on the same port (the data it held is lost, as moto keeps it in
memory).
"""
from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import time

import pytest

#: Credentials the server accepts (moto accepts any); fake on purpose, so a
#: test can check they never show in errors, reprs or logs.
ACCESS_KEY = "AKIAJASKTESTACCESSKEY"
SECRET_KEY = "jask-test-secret-key-never-shown"


def zarr_store(url: str, *, read_only: bool = False):
    """zarr-python's own store for ``url`` (``s3://bucket/key``): its
    ``ObjectStore`` over obstore, configured by the standard environment
    variables, as a user without jask reaches the bucket."""
    from urllib.parse import quote

    import zarr
    from obstore.store import from_url

    # rooted at the key, as a URL is for zarr (a StorePath on the bucket makes
    # zarr write parent groups' metadata above it); obstore decodes a URL's
    # path, and keys are literal
    bucket, _, key = url.removeprefix("s3://").partition("/")
    root = f"s3://{bucket}/{quote(key.strip('/'), safe='/')}"
    return zarr.storage.ObjectStore(from_url(root), read_only=read_only)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """One moto server process on 127.0.0.1."""

    def __init__(self, port: int | None = None):
        self.port = port or _free_port()
        self.process: subprocess.Popen | None = None
        self._buckets = itertools.count()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict:
        """The standard variables every S3 client reads (obstore also needs
        ``AWS_ALLOW_HTTP`` for an http endpoint)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }

    def start(self, timeout: float = 30.0) -> "S3Server":
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start on port {self.port}")
                time.sleep(0.05)

    def kill(self) -> None:
        """Stop the server at once (SIGKILL), as an endpoint that dies."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()

    def make_bucket(self, name: str | None = None) -> str:
        """A new empty bucket; returns its ``s3://`` URL."""
        import boto3

        name = name or f"jask-test-{next(self._buckets)}"
        boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                     aws_secret_access_key=SECRET_KEY,
                     region_name="us-east-1").create_bucket(Bucket=name)
        return f"s3://{name}"


@pytest.fixture(scope="session")
def s3_server():
    """A moto S3 server process for this test session (this xdist worker)."""
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server, monkeypatch):
    """A fresh bucket's ``s3://`` URL, the server's variables set in ``os.environ``."""
    if s3_server.process is None or s3_server.process.poll() is not None:
        s3_server.start()  # a previous test killed it
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    return s3_server.make_bucket()


def environment_for(server: S3Server) -> dict:
    """``os.environ`` plus the server's variables, for a child process."""
    return {**os.environ, **server.env}
