"""Blob stores: where the bytes of stored files live, addressed by their SHA-256 digest.

``BlobStore`` says what a store does; ``LocalBlobStore`` keeps the bytes as files under a
data directory (``S3BlobStore``, in ``protege.blobs.s3``, as objects in a shared bucket).
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path
from typing import Protocol, runtime_checkable

from protege.errors import BlobMissingError

_DIGEST = re.compile(r"[0-9a-f]{64}")


@runtime_checkable
class BlobStore(Protocol):
    """What ``protege.blobs`` needs of a place to keep bytes by their SHA-256 digest (hex).

    Content-addressed, so putting the same bytes twice keeps them once. A *mark* is an
    opaque token that changes whenever ``put`` writes or reuses the bytes: ``removed_on_failure``
    compares it to tell bytes that someone else stored since from bytes it alone wrote.
    """

    def put(self, digest: str, data: bytes) -> str | None:
        """Keep ``data`` under ``digest``. Returns the new mark when this call wrote the bytes;
        None when they were there already (they are then marked as just reused)."""
        ...

    def get(self, digest: str) -> bytes:
        """The bytes under ``digest``; ``BlobMissingError`` when there are none."""
        ...

    def exists(self, digest: str) -> bool:
        """Whether bytes are kept under ``digest``."""
        ...

    def delete(self, digest: str) -> None:
        """Forget the bytes under ``digest`` (nothing happens when there are none)."""
        ...

    def mark(self, digest: str) -> str | None:
        """The current mark of the bytes under ``digest``, or None when there are none."""
        ...

    def check(self) -> None:
        """Raise ``BlobStoreError`` saying why, when the store cannot be reached."""
        ...


def checked_digest(digest: str) -> str:
    """``digest`` when it is a SHA-256 hex digest; a ``ValueError`` otherwise (it names a path
    or a key, so anything else is refused rather than followed)."""
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise ValueError(f"not a SHA-256 hex digest: {digest!r}")
    return digest


def blob_path(data_dir: Path, sha256: str) -> Path:
    """Where a ``LocalBlobStore`` under ``data_dir`` keeps the bytes with this digest."""
    return Path(data_dir) / "blobs" / sha256[:2] / sha256[2:]


class LocalBlobStore:
    """Bytes as files under ``<data_dir>/blobs/``, named by their digest (the default)."""

    __slots__ = ("_data_dir",)

    def __init__(self, data_dir: Path | str) -> None:
        self._data_dir = Path(data_dir)

    @property
    def data_dir(self) -> Path:
        """The data directory whose ``blobs/`` folder holds the files (read-only: every run
        and the gateway store into the same one)."""
        return self._data_dir

    def __repr__(self) -> str:
        return f"LocalBlobStore({str(self.data_dir)!r})"

    def path(self, digest: str) -> Path:
        """The file that holds (or would hold) the bytes under ``digest``."""
        return blob_path(self.data_dir, checked_digest(digest))

    def put(self, digest: str, data: bytes) -> str | None:
        """Write the file atomically, unless it is there; then only touch it (see ``BlobStore``)."""
        path = self.path(digest)
        try:
            # Marked to the nanosecond, finer than the file system's own clock, so that a
            # failed store that wrote the file just before sees it in use and leaves it.
            now = time.time_ns()
            os.utime(path, ns=(now, now))
            return None
        except FileNotFoundError:
            _write(path, data)
            return str(path.stat().st_mtime_ns)

    def get(self, digest: str) -> bytes:
        """The file's bytes; ``BlobMissingError`` when it is gone."""
        try:
            return self.path(digest).read_bytes()
        except FileNotFoundError:
            missing = f"blob {digest} is missing from {self.data_dir / 'blobs'}"
            raise BlobMissingError(missing) from None

    def exists(self, digest: str) -> bool:
        """Whether the file is there."""
        return self.path(digest).is_file()

    def delete(self, digest: str) -> None:
        """Remove the file, if there."""
        self.path(digest).unlink(missing_ok=True)

    def mark(self, digest: str) -> str | None:
        """The file's modification time in nanoseconds, or None when it is gone."""
        try:
            return str(self.path(digest).stat().st_mtime_ns)
        except FileNotFoundError:
            return None

    def check(self) -> None:
        """Nothing to reach: the folder is made when the first file is written."""


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # people's files: owner only
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as handle:
        handle.write(data)
    os.replace(handle.name, path)
