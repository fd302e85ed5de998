"""Stored files: a failed store takes back only what nobody else uses."""

import threading

import pytest

from protege import blobs
from protege.db import database
from protege.models import Blob


class Failed(Exception):
    pass


def test_a_failed_store_removes_the_files_it_wrote(protege_db, tmp_path):
    def store_then_fail() -> None:
        with blobs.removed_on_failure(), database.atomic():
            blobs.store(b"only here", filename="a.txt", data_dir=tmp_path)
            raise Failed

    with pytest.raises(Failed):
        store_then_fail()
    assert list((tmp_path / "blobs").glob("*/*")) == []


def test_a_failed_store_keeps_a_file_another_open_transaction_reuses(protege_db, tmp_path):
    reused, other_may_commit = threading.Event(), threading.Event()

    def other_mail() -> None:  # stores the same bytes, and commits only after the failure
        with database.atomic():
            blobs.store(b"same bytes", filename="b.pdf", data_dir=tmp_path)
            reused.set()
            other_may_commit.wait(30)
        database.close()

    other = threading.Thread(target=other_mail)

    def store_then_fail() -> None:
        with blobs.removed_on_failure():
            mine = blobs.store(b"same bytes", filename="a.pdf", data_dir=tmp_path)
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
    assert blobs.read(row, tmp_path) == b"same bytes"
