"""An S3-compatible server on 127.0.0.1 (moto's), started and stopped by the tests using it."""

from __future__ import annotations

import socket

import pytest
from scenarios.clusters.s3_store import CREDENTIALS  # tests import it from here too


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def s3_server(monkeypatch):
    """``(storage_uri, client)``: a bucket on a moto S3 server and a boto3 client for it.

    ``storage_uri`` is an ``s3://`` URI with the server as its endpoint override, as a lab's
    own MinIO or Ceph store is given to ``--storage``. Credentials go into this process's
    environment, which subprocesses (and the Ray they start) inherit.
    """
    for uri, client, _ in _s3_server(monkeypatch):
        yield uri, client


@pytest.fixture
def counting_s3_server(monkeypatch):
    """``(storage_uri, client, writes)``: ``s3_server``, with ``writes``
    (``tests/scenarios/clusters/s3_store.Writes``) recording the body bytes PUT to each key."""
    yield from _s3_server(monkeypatch)


def _s3_server(monkeypatch):
    boto3 = pytest.importorskip("boto3")
    pytest.importorskip("moto.server")
    from scenarios.clusters.s3_store import Writes, counting_moto_server

    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    port = free_port()
    writes = Writes()
    server = counting_moto_server("127.0.0.1", port, writes)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket="raylab")
        yield f"s3://raylab/runs?endpoint_override={endpoint}&scheme=http", client, writes
    finally:
        server.stop()
