"""Stored files, in each blob store: kept once, read back whole, and a failed store takes
back only what nobody else uses."""

import threading

import pytest

from protege import blobs
from protege.config import load_config
from protege.db import database
from protege.errors import BlobMissingError, BlobStoreError
from protege.models import Blob

pytestmark = pytest.mark.usefixtures("blob_store")


class Failed(Exception):
    pass


@pytest.fixture
def config():
    return load_config()


def test_stored_bytes_read_back_whole_and_are_kept_once(protege_db, config, behind_the_store):
    first = blobs.store(b"report", filename="a.txt", config=config)
    second = blobs.store(b"report", filename="b.txt", content_type="text/plain", config=config)
    assert (first.sha256, first.size, first.filename) == (second.sha256, 6, "a.txt")
    assert first.id != second.id
    assert blobs.read(second, config) == b"report"
    assert behind_the_store.digests(config) == {first.sha256}


def test_the_store_is_built_once_per_configuration(config):
    assert blobs.blob_store_for(config) is blobs.blob_store_for(load_config())


def test_missing_bytes_are_the_same_error_in_every_store(protege_db, config):
    blob = blobs.store(b"gone soon", filename="a.txt", config=config)
    blobs.blob_store_for(config).delete(blob.sha256)
    with pytest.raises(BlobMissingError, match=f"blob {blob.sha256} is missing"):
        blobs.read(blob, config)
    with pytest.raises(FileNotFoundError):  # what reading a file that is gone always raised
        blobs.read(blob, config)


def test_bytes_that_no_longer_match_their_digest_are_refused(protege_db, config, behind_the_store):
    blob = blobs.store(b"the real bytes", filename="a.txt", config=config)
    behind_the_store.overwrite(config, blob.sha256, b"other bytes")
    with pytest.raises(BlobStoreError, match=f"blob {blob.id} is damaged"):
        blobs.read(blob, config)


def test_a_failed_store_removes_the_files_it_wrote(protege_db, config, behind_the_store):
    def store_then_fail() -> None:
        with blobs.removed_on_failure(), database.atomic():
            blobs.store(b"only here", filename="a.txt", config=config)
            raise Failed

    with pytest.raises(Failed):
        store_then_fail()
    assert behind_the_store.digests(config) == set()


def test_a_failed_store_keeps_a_file_a_committed_row_uses(protege_db, config, behind_the_store):
    kept = blobs.store(b"in use", filename="a.txt", config=config)

    def store_then_fail() -> None:
        with blobs.removed_on_failure(), database.atomic():
            blobs.store(b"in use", filename="b.txt", config=config)
            raise Failed

    with pytest.raises(Failed):
        store_then_fail()
    assert blobs.read(kept, config) == b"in use"


def test_a_failed_store_keeps_a_file_another_open_transaction_reuses(protege_db, config):
    reused, other_may_commit = threading.Event(), threading.Event()

    def other_mail() -> None:  # stores the same bytes, and commits only after the failure
        with database.atomic():
            blobs.store(b"same bytes", filename="b.pdf", config=config)
            reused.set()
            other_may_commit.wait(30)
        database.close()

    other = threading.Thread(target=other_mail)

    def store_then_fail() -> None:
        with blobs.removed_on_failure():
            mine = blobs.store(b"same bytes", filename="a.pdf", config=config)
            mine.delete_instance()  # as a rolled-back transaction would leave it
            other.start()
            reused.wait(30)
            raise Failed

    with pytest.raises(Failed):
        store_then_fail()
    assert reused.is_set()
    other_may_commit.set()
    other.join(30)
    (row,) = Blob.select()
    assert blobs.read(row, config) == b"same bytes"


def test_a_store_object_and_a_data_dir_name_the_same_bytes(protege_db, config):
    target = blobs.blob_store_for(config)
    blob = blobs.store(b"either way", filename="a.txt", config=target)
    assert blobs.read(blob, target) == blobs.read(blob, config) == b"either way"
    if config.blobs.store == "local":  # the way plugins written before [blobs] call it
        old = blobs.store(b"either way", filename="b.txt", data_dir=config.data_dir)
        assert blobs.read(old, config.data_dir) == blobs.read(old, data_dir=config.data_dir)


def test_a_place_for_the_bytes_must_be_named_once(protege_db, config):
    with pytest.raises(TypeError, match="name one place"):
        blobs.store(b"x", filename="a.txt")
    with pytest.raises(TypeError, match="name one place"):
        blobs.store(b"x", filename="a.txt", config=config, data_dir=config.data_dir)


@pytest.mark.parametrize("digest", ["../../etc/passwd", "AB" * 32, "ab" * 31, ""])
def test_a_digest_that_is_not_one_names_no_file(config, digest):
    target = blobs.blob_store_for(config)
    for call in (target.get, target.exists, target.delete, target.mark):
        with pytest.raises(ValueError, match="not a SHA-256 hex digest"):
            call(digest)
