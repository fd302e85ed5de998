"""Stored files (public API): put bytes in, get a ``Blob`` row; read them back by blob.

The bytes are content-addressed files under ``<data_dir>/blobs/`` (the same content is kept
once); each stored file is still its own ``Blob`` row, with its own name and type.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import unicodedata
from pathlib import Path

from protege.models import Agent, Blob

MAX_FILENAME = 120
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


def blob_path(data_dir: Path, sha256: str) -> Path:
    """Where the bytes with this digest live."""
    return Path(data_dir) / "blobs" / sha256[:2] / sha256[2:]


def store(
    data: bytes,
    *,
    filename: str | None,
    content_type: str = "application/octet-stream",
    agent: Agent | None = None,
    data_dir: Path | None = None,
) -> Blob:
    """Keep ``data`` and return its new ``Blob`` row.

    The file is written (atomically, once per content) before the row, so a row never
    points at missing bytes.
    """
    data_dir = _data_dir(data_dir)
    digest = hashlib.sha256(data).hexdigest()
    path = blob_path(data_dir, digest)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as handle:
            handle.write(data)
        os.replace(handle.name, path)
    return Blob.create(
        sha256=digest,
        size=len(data),
        content_type=content_type or "application/octet-stream",
        filename=sanitize_filename(filename),
        agent=agent,
    )


def read(blob: Blob, data_dir: Path | None = None) -> bytes:
    """The bytes of ``blob``."""
    return blob_path(_data_dir(data_dir), blob.sha256).read_bytes()


def _data_dir(data_dir: Path | None) -> Path:
    if data_dir is not None:
        return Path(data_dir)
    from protege.config import load_config

    return load_config().data_dir
