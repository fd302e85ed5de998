"""Stored files (public API): put bytes in, get a ``Blob`` row; read them back by blob.

The bytes are content-addressed (the same content is kept once) in the blob store
``protege.toml`` chooses by name with ``[blobs] store``: files under ``<data_dir>/blobs/``
(``local``, the default), objects in an S3-compatible bucket several machines share (``s3``),
or a store a plugin registers through ``register_blob_stores``. Each stored file is still
its own ``Blob`` row, with its own name and type. Pass the ``Config`` (``context.config`` in
a tool) to ``store`` and ``read``: an installation's config carries the store it resolved
when it opened. A ``data_dir`` path, as before, means the local store there.
``sniff`` and ``as_text`` tell what stored bytes really are, whatever type they were sent as.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import attrs

from protege.blobs.s3 import S3BlobStore
from protege.blobs.stores import BlobStore, LocalBlobStore, blob_path
from protege.config import BlobSettings, Config
from protege.defaults.blob_stores import BUILTIN_STORES
from protege.errors import BlobMissingError, BlobStoreError, ConfigError, did_you_mean
from protege.filetypes import IMAGE_TYPES, PDF_TYPE, as_text, sniff
from protege.models import Agent, Blob

__all__ = [
    "IMAGE_TYPES",
    "MAX_FILENAME",
    "PDF_TYPE",
    "BlobMissingError",
    "BlobStore",
    "BlobStoreError",
    "LocalBlobStore",
    "S3BlobStore",
    "as_text",
    "blob_path",
    "blob_store_for",
    "read",
    "removed_on_failure",
    "sanitize_filename",
    "sniff",
    "store",
]

MAX_FILENAME = 120
# What ``store`` wrote inside ``removed_on_failure`` (store, digest, mark), so that a failed
# transaction takes it back.
_written: contextvars.ContextVar[list[tuple[BlobStore, str, str]] | None] = contextvars.ContextVar(
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


@attrs.frozen
class _Resolved:
    """The blob store an installation resolved, with the settings it was made for."""

    settings: BlobSettings
    data_dir: Path
    store: BlobStore


def with_blob_store(config: Config, store: BlobStore) -> Config:
    """``config`` carrying ``store`` as its blob store: what the installation hands down, so
    that ``store(..., config=context.config)`` and ``read(blob, config)`` reach the store it
    resolved by name (a plugin's too)."""
    return attrs.evolve(config, blob_store=_Resolved(config.blobs, Path(config.data_dir), store))


def blob_store_for(config: Config) -> BlobStore:
    """The blob store ``config`` chooses (``[blobs] store``): the one its installation
    resolved, or else protege's own of that name, the same object for the same settings
    (an S3 client and its connections are made once, not per file)."""
    resolved = config.blob_store
    if (
        isinstance(resolved, _Resolved)
        and resolved.settings == config.blobs
        and resolved.data_dir == Path(config.data_dir)
    ):
        return resolved.store
    name = config.blobs.store
    factory = BUILTIN_STORES.get(name)
    if factory is None:
        raise ConfigError(
            f"[blobs] store {name!r} is not one of protege's own "
            f"({', '.join(sorted(BUILTIN_STORES))}){did_you_mean(name, BUILTIN_STORES)}; "
            "a plugin's blob store is reached through the installation's config"
        )
    return factory(config)


def _store_of(
    where: Config | BlobStore | Path | str | None, data_dir: Path | str | None
) -> BlobStore:
    if data_dir is not None and where is None:
        return LocalBlobStore(Path(data_dir))
    if where is None or data_dir is not None:
        raise TypeError("name one place for the bytes: the Config, a BlobStore, or data_dir")
    if isinstance(where, Config):
        return blob_store_for(where)
    if isinstance(where, str | os.PathLike):
        return LocalBlobStore(Path(where))
    return where


def store(
    data: bytes,
    *,
    filename: str | None,
    content_type: str = "application/octet-stream",
    agent: Agent | None = None,
    config: Config | BlobStore | None = None,
    data_dir: Path | None = None,
) -> Blob:
    """Keep ``data`` and return its new ``Blob`` row.

    ``config`` (``context.config`` in a tool) names the blob store, or is a ``BlobStore``
    itself; ``data_dir`` instead means the local store under that folder. The bytes are
    written (once per content) before the row, so a row never points at missing bytes.
    """
    target = _store_of(config, data_dir)
    digest = hashlib.sha256(data).hexdigest()
    mark = target.put(digest, data)
    if mark is not None:
        written = _written.get()
        if written is not None:
            written.append((target, digest, mark))
    return Blob.insert_new(
        sha256=digest,
        size=len(data),
        content_type=content_type or "application/octet-stream",
        filename=sanitize_filename(filename),
        agent=agent,
    )


@contextlib.contextmanager
def removed_on_failure() -> Iterator[None]:
    """Bytes that ``store`` writes inside this block are deleted again if the block raises.

    Wrap a database transaction that stores blobs in it, so a rolled-back transaction leaves
    no file that no row points at. Bytes some row already points at are kept.
    """
    written: list[tuple[BlobStore, str, str]] = []
    token = _written.set(written)
    try:
        yield
    except BaseException:
        for target, digest, mark in written:
            # Kept if another store marked it since (it may be in a transaction not yet
            # committed), or if a row uses it, or if the database or the store cannot say.
            with contextlib.suppress(Exception):
                if target.mark(digest) != mark:
                    continue
                if not Blob.select().where(Blob.sha256 == digest).exists():
                    target.delete(digest)
        raise
    finally:
        _written.reset(token)


def read(
    blob: Blob,
    where: Config | BlobStore | Path | None = None,
    *,
    data_dir: Path | None = None,
) -> bytes:
    """The bytes of ``blob``, from the blob store ``where`` names: the ``Config``
    (``context.config`` in a tool), a ``BlobStore``, or a data directory (its local store).

    ``BlobMissingError`` (a ``FileNotFoundError``) when the bytes are gone, and
    ``BlobStoreError`` (an ``OSError``) when the store fails or gives back other bytes than
    the blob's.
    """
    data = _store_of(where, data_dir).get(blob.sha256)
    if hashlib.sha256(data).hexdigest() != blob.sha256:
        raise BlobStoreError(f"blob {blob.id} is damaged: its bytes no longer match their digest")
    return data
