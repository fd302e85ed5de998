"""protege's own blob stores, ``local`` and ``s3``: an internal plugin, registered before the
installed ones, offering them through ``register_blob_stores`` as any plugin would.

Each is made once per place (a data directory, a bucket's settings), so that an S3 client
and its connections are made once, not per file or per installation.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from protege.blobs.s3 import S3BlobStore
from protege.blobs.stores import BlobStore, LocalBlobStore
from protege.config import BlobSettings, Config
from protege.hookspecs import hookimpl


def local_store(config: Config) -> BlobStore:
    """Files under ``<data_dir>/blobs``."""
    return _local(Path(config.data_dir))


def s3_store(config: Config) -> BlobStore:
    """Objects in the bucket ``[blobs]`` names."""
    return _s3(config.blobs)


@functools.lru_cache(maxsize=64)
def _local(data_dir: Path) -> BlobStore:
    return LocalBlobStore(data_dir)


@functools.lru_cache(maxsize=64)
def _s3(settings: BlobSettings) -> BlobStore:
    return S3BlobStore.from_settings(settings)


BUILTIN_STORES: dict[str, Callable[[Config], BlobStore]] = {"local": local_store, "s3": s3_store}


@hookimpl
def register_blob_stores(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Offer ``local`` and ``s3``."""
    for name, factory in BUILTIN_STORES.items():
        register(name, factory)
