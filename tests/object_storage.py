"""A local S3-compatible server for the object-storage tests: moto's, on 127.0.0.1, reached through s3fs.

:func:`s3_server` starts one server per test session (per pytest-xdist worker) on a free port, in a thread of
the test process that ends with it. :func:`s3_bucket` gives each test a new, empty bucket and points this
process and every process it starts at the server through the environment (``AWS_ENDPOINT_URL`` and fake
credentials, which botocore and so s3fs read), so that the two-process jobs write into the same bucket.

The root ``conftest.py`` names this module in ``pytest_plugins``: every test may ask for ``s3_bucket``.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

#: The environment that points botocore (and so s3fs, in this process and in its children) at the server.
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    # No shared config or credentials file of the developer's is read.
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
}


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """The endpoint URL (``http://127.0.0.1:PORT``) of a moto S3 server running for the session."""
    pytest.importorskip("s3fs")
    server_module = pytest.importorskip("moto.server")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request otherwise
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@functools.cache
def _filesystem() -> Any:
    import s3fs

    # Not fsspec's cached instance, and no listing cache: the tests look at what the server holds now. One
    # per process (the server's endpoint is the session's), made once: a new client takes most of a second.
    return s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)


@pytest.fixture
def s3_bucket(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``s3://<new bucket>``, empty, on the session's server; this process and its children reach it."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    name = f"test-{uuid.uuid4().hex[:16]}"
    fs = _filesystem()
    fs.mkdir(name)
    yield f"s3://{name}"


def s3() -> Any:
    """An ``s3fs.S3FileSystem`` on the test's server without caches (call inside a test using ``s3_bucket``)."""
    return _filesystem()


def keys(url: str) -> list[str]:
    """Every object under ``url`` (``s3://bucket/prefix``), as keys relative to ``url``, sorted."""
    fs = _filesystem()
    root = url.removeprefix("s3://").rstrip("/")
    return sorted(path[len(root) + 1 :] for path in fs.find(root))


def uploads_in_progress(bucket_url: str) -> list[str]:
    """The keys of the multipart uploads started in the bucket and neither completed nor aborted."""
    import boto3

    client = boto3.client("s3")
    answer = client.list_multipart_uploads(Bucket=bucket_url.removeprefix("s3://").split("/", 1)[0])
    return [upload["Key"] for upload in answer.get("Uploads", [])]


def wait_until(condition: Any, timeout: float, what: str) -> None:
    """Poll ``condition()`` every 20 ms until it is true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)
