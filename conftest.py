"""Fixtures shared by the engine's and the built-in plugins' tests: the blob stores that the
file tests run against, the local folder and S3 (moto's server, on loopback, started here)."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from protege import blobs
from protege.config import BLOB_STORE_VARIABLE, CONFIG_VARIABLE, Config

# The test server takes any credentials until told to check them (checking_credentials).
S3_KEY_ID, S3_SECRET = "protege-test-key", "protege-test-secret"
S3_KEY_ID_VARIABLE, S3_SECRET_VARIABLE = "PROTEGE_TEST_S3_KEY_ID", "PROTEGE_TEST_S3_SECRET"
S3_REGION = "us-east-1"


def _toml(value: object) -> str:
    """``value`` written as TOML (strings quoted, numbers as they are)."""
    return json.dumps(value) if isinstance(value, str) else str(value).lower()


class S3Server:
    """An S3-compatible server on loopback (moto), for this test session or xdist worker."""

    credentials = {S3_KEY_ID_VARIABLE: S3_KEY_ID, S3_SECRET_VARIABLE: S3_SECRET}
    """The environment variables the configurations ``write_config`` writes name, and values."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint_url = f"http://{host}:{port}"

    def client(self, key_id: str = S3_KEY_ID, secret: str = S3_SECRET) -> Any:
        """A boto3 client of the server, to set up and look behind the store under test."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=S3_REGION,
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
        )

    def new_bucket(self) -> str:
        """A bucket of its own for one test."""
        name = f"protege-test-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        return name

    def write_config(self, folder: Path, bucket: str, **settings: object) -> Path:
        """A ``protege.toml`` in ``folder`` choosing the S3 blob store in ``bucket`` here
        (its credentials named by ``credentials``); ``settings`` adds to ``[blobs]``."""
        lines = {
            "store": "s3",
            "bucket": bucket,
            "endpoint_url": self.endpoint_url,
            "region": S3_REGION,
            "prefix": "blobs/",
            "access_key_id_env": S3_KEY_ID_VARIABLE,
            "secret_access_key_env": S3_SECRET_VARIABLE,
            **settings,
        }
        path = folder / "protege.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        body = "".join(f"{key} = {_toml(value)}\n" for key, value in lines.items())
        path.write_text(f"[blobs]\n{body}")
        return path

    def keys(self, bucket: str) -> set[str]:
        """Every object key in ``bucket``."""
        found: set[str] = set()
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket):
            found.update(item["Key"] for item in page.get("Contents", ()))
        return found

    @contextlib.contextmanager
    def checking_credentials(self) -> Iterator[None]:
        """Within the block the server refuses any key it has not issued (by default it takes
        any); a setting of the whole server, so only for tests that run one at a time."""
        httpx.post(f"{self.endpoint_url}/moto-api/reset-auth", content=b"0").raise_for_status()
        try:
            yield
        finally:
            httpx.post(f"{self.endpoint_url}/moto-api/reset-auth", content=b"inf")

    def stop(self) -> None:
        """Stop serving."""
        self._server.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """The S3-compatible server on loopback the S3 blob store is tested against."""
    server = S3Server()
    yield server
    server.stop()


@pytest.fixture(params=["local", "s3"])
def blob_store(
    request: pytest.FixtureRequest, protege_db: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """Runs the test once with each blob store: ``load_config()`` then chooses the local
    folder (as ``protege_db`` leaves it), or S3 in a bucket of the test's own on the loopback
    server, through a ``protege.toml`` named by ``PROTEGE_CONFIG``. Gives the store's kind."""
    if request.param == "s3":
        server: S3Server = request.getfixturevalue("s3_server")
        path = server.write_config(tmp_path / "s3-config", server.new_bucket())
        monkeypatch.setenv(CONFIG_VARIABLE, str(path))
        monkeypatch.setenv(BLOB_STORE_VARIABLE, "s3")
        for name, value in server.credentials.items():
            monkeypatch.setenv(name, value)
    return str(request.param)


class BehindTheStore:
    """Looks at and changes what a blob store holds without going through the store."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request

    def _s3(self, config: Config) -> tuple[S3Server, str, str]:
        server: S3Server = self._request.getfixturevalue("s3_server")
        assert config.blobs.bucket is not None
        return server, config.blobs.bucket, config.blobs.prefix

    def digests(self, config: Config) -> set[str]:
        """The digests of every file ``config``'s blob store holds."""
        if config.blobs.store == "s3":
            server, bucket, prefix = self._s3(config)
            return {key.removeprefix(prefix).replace("/", "") for key in server.keys(bucket)}
        return {p.parent.name + p.name for p in (config.data_dir / "blobs").glob("*/*")}

    def overwrite(self, config: Config, digest: str, data: bytes) -> None:
        """Put ``data`` where the bytes under ``digest`` are, as damage or an attacker would."""
        if config.blobs.store == "s3":
            server, bucket, prefix = self._s3(config)
            key = f"{prefix}{digest[:2]}/{digest[2:]}"
            server.client().put_object(Bucket=bucket, Key=key, Body=data)
        else:
            blobs.blob_path(config.data_dir, digest).write_bytes(data)


@pytest.fixture
def behind_the_store(request: pytest.FixtureRequest) -> BehindTheStore:
    """What a blob store holds, seen and changed without the store (see ``BehindTheStore``)."""
    return BehindTheStore(request)


@pytest.fixture(autouse=True)
def no_installation_left_open() -> Iterator[None]:
    """A test that opens an installation with a database of its own closes it: one left
    open would take the records of every later test in this process."""
    from protege import dbroute

    yield
    left = dbroute.owned()
    for database in left:
        dbroute.closed(database)
        database.close()
    assert not left, f"{len(left)} installation(s) left open by this test"
