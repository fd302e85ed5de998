"""Stored files (public API): put bytes in, get a ``Blob`` row; read them back by blob.

The bytes are content-addressed files under ``<data_dir>/blobs/`` (the same content is kept
once); each stored file is still its own ``Blob`` row, with its own name and type.
``sniff`` and ``as_text`` tell what stored bytes really are, whatever type they were sent as.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import re
import tempfile
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path

from protege.filetypes import IMAGE_TYPES, PDF_TYPE, as_text, sniff
from protege.models import Agent, Blob

__all__ = [
    "IMAGE_TYPES",
    "MAX_FILENAME",
    "PDF_TYPE",
    "as_text",
    "blob_path",
    "read",
    "removed_on_failure",
    "sanitize_filename",
    "sniff",
    "store",
]

MAX_FILENAME = 120
# Files written inside ``removed_on_failure``, so a failed transaction takes them back.
_written: contextvars.ContextVar[list[tuple[Path, int]] | None] = contextvars.ContextVar(
    "protege_blobs_written", default=None
)
_UNSAFE = re.compile(r"[^\w.\- ]+")


def sanitize_filename(name: str | None, default: str = "attachment") -> str:
    """A filename safe to store and to send: no folders, controls or odd characters."""
    name = unicodedata.normalize("NFKC", name or "")
    name = name.replace("\\", "/").rsplit("/", 1)[-1]
    name = _UNSAFE.sub("_", name).strip(" ._")
    if not name:
        return default
    stem, dot, extension = name.rpartition(".")
    if dot and len(extension) <= 10:
        return f"{stem[: MAX_FILENAME - len(extension) - 1]}.{extension}"
    return name[:MAX_FILENAME]


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as handle:
        handle.write(data)
    os.replace(handle.name, path)


def blob_path(data_dir: Path, sha256: str) -> Path:
    """Where the bytes with this digest live."""
    return Path(data_dir) / "blobs" / sha256[:2] / sha256[2:]


def store(
    data: bytes,
    *,
    filename: str | None,
    content_type: str = "application/octet-stream",
    agent: Agent | None = None,
    data_dir: Path,
) -> Blob:
    """Keep ``data`` and return its new ``Blob`` row.

    The file is written (atomically, once per content) before the row, so a row never
    points at missing bytes.
    """
    digest = hashlib.sha256(data).hexdigest()
    path = blob_path(data_dir, digest)
    try:
        # Already there: mark it (to the nanosecond, finer than the file system's own clock),
        # so that a failed store that wrote it just before sees it in use and leaves it.
        now = time.time_ns()
        os.utime(path, ns=(now, now))
    except FileNotFoundError:
        _write(path, data)
        written = _written.get()
        if written is not None:
            written.append((path, path.stat().st_mtime_ns))
    return Blob.create(
        sha256=digest,
        size=len(data),
        content_type=content_type or "application/octet-stream",
        filename=sanitize_filename(filename),
        agent=agent,
    )


@contextlib.contextmanager
def removed_on_failure() -> Iterator[None]:
    """Files that ``store`` writes inside this block are deleted again if the block raises.

    Wrap a database transaction that stores blobs in it, so a rolled-back transaction leaves
    no file that no row points at. A file some row already points at is kept.
    """
    written: list[tuple[Path, int]] = []
    token = _written.set(written)
    try:
        yield
    except BaseException:
        for path, mtime in written:
            # Kept if another store touched it since (it may be in a transaction not yet
            # committed), or if a row uses it, or if the database cannot say.
            with contextlib.suppress(Exception):
                if path.stat().st_mtime_ns != mtime:
                    continue
                if not Blob.select().where(Blob.sha256 == path.parent.name + path.name).exists():
                    path.unlink(missing_ok=True)
        raise
    finally:
        _written.reset(token)


def read(blob: Blob, data_dir: Path) -> bytes:
    """The bytes of ``blob``, kept under ``data_dir``."""
    return blob_path(data_dir, blob.sha256).read_bytes()
