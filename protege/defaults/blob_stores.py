"""protege's own blob stores, ``local`` and ``s3`` (``protege.blobs.stores.LocalBlobStore``
and ``protege.blobs.s3.S3BlobStore``), offered through ``register_blob_stores`` as any
plugin would.

Each is made once per place (a data directory, a bucket's settings), so that an S3 client
and its connections are made once, not per file or per installation.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from protege.config import BlobSettings, Config
from protege.defaults import imported
from protege.hookspecs import hookimpl


def local(config: Config) -> Any:
    """Files under ``<data_dir>/blobs``."""
    return _local(Path(config.data_dir))


def s3(config: Config) -> Any:
    """Objects in the bucket ``[blobs]`` names."""
    return _s3(config.blobs)


@functools.lru_cache(maxsize=64)
def _local(data_dir: Path) -> Any:
    return imported("protege.blobs.stores", "LocalBlobStore")(data_dir)


@functools.lru_cache(maxsize=64)
def _s3(settings: BlobSettings) -> Any:
    return imported("protege.blobs.s3", "S3BlobStore").from_settings(settings)


BUILTIN_STORES: dict[str, Callable[[Config], Any]] = {"local": local, "s3": s3}


@hookimpl
def register_blob_stores(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Offer ``local`` and ``s3``."""
    for name, factory in BUILTIN_STORES.items():
        register(name, factory)
