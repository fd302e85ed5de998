"""The S3 blob store's own failures, against an S3-compatible server on loopback: each is one
sentence a person can act on, and bytes that are gone are the same error as for local files."""

import os
import socket
import sys

import pytest

from protege import blobs
from protege.blobs import S3BlobStore
from protege.config import load_config
from protege.errors import BlobMissingError, BlobStoreError, ConfigError

DIGEST = "ab" * 32


@pytest.fixture
def s3_config(protege_db, s3_server, tmp_path, monkeypatch):
    """Writes the configuration of an S3 blob store on the test server; gives a loader."""
    for name, value in s3_server.credentials.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PROTEGE_BLOB_STORE", "s3")

    def configure(bucket=None, folder="project", **settings):
        path = s3_server.write_config(
            tmp_path / folder, bucket or s3_server.new_bucket(), **settings
        )
        # Each folder is a machine: its data directory is its own, next to its protege.toml.
        environ = {k: v for k, v in os.environ.items() if k != "PROTEGE_DATA_DIR"}
        return load_config(path.parent, environ=environ)

    return configure


def test_two_machines_with_their_own_data_directories_share_the_files(s3_config, s3_server):
    bucket = s3_server.new_bucket()
    here = s3_config(bucket, folder="machine-a")
    there = s3_config(bucket, folder="machine-b")
    assert here.data_dir != there.data_dir
    blob = blobs.store(b"shared", filename="a.txt", config=here)
    assert blobs.read(blob, there) == b"shared"
    assert not (here.data_dir / "blobs").exists()  # nothing on the machine's own disk


def test_objects_are_kept_under_the_prefix(s3_config, s3_server):
    config = s3_config(prefix="team/protege/")
    blob = blobs.store(b"prefixed", filename="a.txt", config=config)
    digest = blob.sha256
    assert s3_server.keys(config.blobs.bucket) == {f"team/protege/{digest[:2]}/{digest[2:]}"}


def test_a_missing_bucket_is_named(s3_config, s3_server):
    config = s3_config(bucket="protege-no-such-bucket")
    expected = (
        f"the S3 bucket 'protege-no-such-bucket' at {s3_server.endpoint_url} does not exist "
        "([blobs] bucket)"
    )
    with pytest.raises(BlobStoreError) as raised:
        blobs.store(b"x", filename="a.txt", config=config)
    assert str(raised.value) == expected
    with pytest.raises(BlobStoreError) as raised:
        blobs.blob_store_for(config).get(DIGEST)
    assert str(raised.value) == expected
    assert not isinstance(raised.value, BlobMissingError)  # the bucket is wrong, not the file
    with pytest.raises(BlobStoreError) as raised:
        blobs.blob_store_for(config).check()
    assert str(raised.value) == expected


def test_credentials_the_service_refuses_are_named_as_the_cause(s3_config, s3_server):
    config = s3_config()
    target = blobs.blob_store_for(config)
    with s3_server.checking_credentials():
        for attempt in (
            lambda: blobs.store(b"x", filename="a.txt", config=config),
            lambda: target.get(DIGEST),
            target.check,
        ):
            with pytest.raises(BlobStoreError, match=r"the S3 service refused to .+ check the"):
                attempt()


def test_a_missing_object_is_the_error_the_local_store_gives(s3_config, tmp_path):
    s3 = blobs.blob_store_for(s3_config())
    local = blobs.LocalBlobStore(tmp_path / "local")
    for target in (s3, local):
        with pytest.raises(BlobMissingError, match=f"blob {DIGEST} is missing from "):
            target.get(DIGEST)
        assert (target.exists(DIGEST), target.mark(DIGEST)) == (False, None)
        target.delete(DIGEST)  # nothing to delete is no error


def test_an_unreachable_service_is_named(s3_config):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = s3_config(endpoint_url=f"http://127.0.0.1:{port}", timeout_seconds=2)
    with pytest.raises(BlobStoreError, match=rf"cannot reach http://127.0.0.1:{port} to reach"):
        blobs.blob_store_for(config).check()


def test_no_credentials_anywhere_is_said_plainly(tmp_path, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    # boto3 must look no further than this machine: no profile files, no instance metadata.
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    target = S3BlobStore("protege-bucket", endpoint_url="http://127.0.0.1:9", region="us-east-1")
    with pytest.raises(BlobStoreError, match=r"^no S3 credentials found: set the variables"):
        target.get(DIGEST)


def test_without_boto3_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "boto3", None)  # as if it were not installed
    with pytest.raises(ConfigError) as raised:
        S3BlobStore("protege-bucket")
    assert str(raised.value) == (
        "the S3 blob store needs boto3, which is not installed: pip install 'protege[s3]'"
    )


def test_mail_arriving_while_the_store_fails_is_deferred_and_nothing_is_kept(s3_config):
    from protege.gateway.inbound import StorageUnavailable, ingest
    from protege.models import Agent, Blob, Message

    sundae = Agent.create(name="Sundae", address="sundae@thescoop.example")
    config = s3_config(bucket="protege-gone")
    raw = b"From: jane@acme.com\r\nTo: sundae@thescoop.example\r\nSubject: Hi\r\n\r\nHello.\r\n"
    with pytest.raises(StorageUnavailable, match="the S3 bucket 'protege-gone'"):
        ingest(raw, config=config, recipients=[sundae.address])
    assert (Message.select().count(), Blob.select().count()) == (0, 0)


def test_mail_queued_on_one_machine_is_sent_by_another(s3_config, s3_server):
    from protege.delivery import send_pending
    from protege.gateway.outbound import queue_mail
    from protege.models import Agent, Message

    bucket = s3_server.new_bucket()
    here, there = s3_config(bucket, folder="machine-a"), s3_config(bucket, folder="machine-b")
    agent = Agent.create(name="Sundae", address="sundae@thescoop.example")
    queue_mail(agent=agent, run=None, config=here, mail={"to": ["jane@acme.com"], "body": "Hi"})
    (sent,) = send_pending(there)  # machine A is gone; B's delivery loop takes the mail
    assert sent.status == "sent"
    (path,) = (there.data_dir / "outbox").glob("*.eml")
    assert (Message.get_by_id(sent.id).message_id).encode() in path.read_bytes()
