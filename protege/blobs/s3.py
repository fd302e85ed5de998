"""``S3BlobStore``: the bytes of stored files as objects in an S3-compatible bucket.

boto3 is imported when such a store is made, so that protege runs without it until
``protege.toml`` chooses S3 (``pip install 'protege[s3]'``).
"""

from __future__ import annotations

import uuid
from typing import Any

from protege.blobs.stores import checked_digest
from protege.config import BlobSettings
from protege.errors import BlobMissingError, BlobStoreError, ConfigError

# The object metadata that holds a blob's mark (see ``BlobStore``); S3 lower-cases the name.
MARK = "protege-mark"
_MISSING = {"404", "NoSuchKey", "NotFound"}
_REFUSED = {
    "403",
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
}


class S3BlobStore:
    """Bytes as objects ``<prefix><first two hex digits>/<the rest>`` in ``bucket``.

    ``endpoint_url`` names an S3-compatible service (MinIO, Ceph, a cloud's own) instead of
    AWS. Credentials left None are found by boto3 (its variables, ``~/.aws``, an instance
    role). Every failure is a ``BlobStoreError`` saying what went wrong in a sentence; bytes
    that are not there are a ``BlobMissingError``, as for the local store.
    """

    def __init__(
        self,
        bucket: str,
        *,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        addressing_style: str = "auto",
        timeout_seconds: float = 30.0,
    ) -> None:
        try:
            import boto3.session
            from botocore.config import Config as ClientConfig
        except ImportError:
            raise ConfigError(
                "the S3 blob store needs boto3, which is not installed: pip install 'protege[s3]'"
            ) from None
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint_url = endpoint_url
        session = boto3.session.Session(
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            aws_session_token=session_token,
            region_name=region,
        )
        self._client: Any = session.client(
            "s3",
            endpoint_url=endpoint_url,
            config=ClientConfig(
                connect_timeout=timeout_seconds,
                read_timeout=timeout_seconds,
                retries={"mode": "standard", "max_attempts": 3},
                s3={"addressing_style": addressing_style},
            ),
        )

    @classmethod
    def from_settings(cls, settings: BlobSettings) -> S3BlobStore:
        """The store ``[blobs]`` describes (its credentials already read from the environment)."""
        if settings.bucket is None:
            raise ConfigError('[blobs] bucket is required when store = "s3"')
        return cls(
            settings.bucket,
            prefix=settings.prefix,
            endpoint_url=settings.endpoint_url,
            region=settings.region,
            access_key_id=settings.access_key_id,
            secret_access_key=settings.secret_access_key,
            session_token=settings.session_token,
            addressing_style=settings.addressing_style,
            timeout_seconds=settings.timeout_seconds,
        )

    def __repr__(self) -> str:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return f"S3BlobStore(s3://{self.bucket}/{self.prefix}{where})"

    def key(self, digest: str) -> str:
        """The object key of the bytes under ``digest``."""
        checked_digest(digest)
        return f"{self.prefix}{digest[:2]}/{digest[2:]}"

    def put(self, digest: str, data: bytes) -> str | None:
        """Upload the object, unless it is there; then only give it a new mark (a copy onto
        itself, done by the service without sending the bytes again)."""
        key, mark = self.key(digest), uuid.uuid4().hex
        try:
            if self._head(key) is not None:
                try:
                    self._client.copy_object(
                        Bucket=self.bucket,
                        Key=key,
                        CopySource={"Bucket": self.bucket, "Key": key},
                        Metadata={MARK: mark},
                        MetadataDirective="REPLACE",
                    )
                    return None
                except Exception as error:
                    if _code(error) not in _MISSING:
                        raise
                    # Deleted since the look (a failed store took it back): write it anew.
            self._client.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=data,
                Metadata={MARK: mark},
                ContentType="application/octet-stream",
            )
            return mark
        except BlobStoreError:
            raise
        except Exception as error:
            raise self._failure(error, "store a file") from None

    def get(self, digest: str) -> bytes:
        """The object's bytes; ``BlobMissingError`` when it is not there."""
        key = self.key(digest)
        try:
            answer = self._client.get_object(Bucket=self.bucket, Key=key)
            data: bytes = answer["Body"].read()
            return data
        except Exception as error:
            if _code(error) in _MISSING:
                raise BlobMissingError(f"blob {digest} is missing from {self!r}") from None
            raise self._failure(error, "read a file") from None

    def exists(self, digest: str) -> bool:
        """Whether the object is there."""
        return self._head(self.key(digest)) is not None

    def delete(self, digest: str) -> None:
        """Delete the object (S3 says yes when it is already gone)."""
        key = self.key(digest)
        try:
            self._client.delete_object(Bucket=self.bucket, Key=key)
        except Exception as error:
            raise self._failure(error, "delete a file") from None

    def mark(self, digest: str) -> str | None:
        """The object's mark (empty when something else wrote it), or None when it is gone."""
        head = self._head(self.key(digest))
        if head is None:
            return None
        metadata: dict[str, str] = head.get("Metadata") or {}
        return metadata.get(MARK, "")

    def check(self) -> None:
        """Ask the service about the bucket: it exists and the credentials may use it."""
        try:
            self._client.head_bucket(Bucket=self.bucket)
        except Exception as error:
            if _code(error) in _MISSING:
                raise BlobStoreError(self._no_bucket()) from None
            raise self._failure(error, "reach the bucket") from None

    def _head(self, key: str) -> dict[str, Any] | None:
        try:
            head: dict[str, Any] = self._client.head_object(Bucket=self.bucket, Key=key)
            return head
        except Exception as error:
            # A missing bucket is a 404 too: the write that follows says which it was.
            if _code(error) in _MISSING:
                return None
            raise self._failure(error, "look up a file") from None

    def _no_bucket(self) -> str:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return f"the S3 bucket {self.bucket!r}{where} does not exist ([blobs] bucket)"

    def _failure(self, error: Exception, doing: str) -> BlobStoreError:
        """``error`` from boto3 as one sentence a person can act on."""
        from botocore.exceptions import (
            ClientError,
            ConnectionError,
            NoCredentialsError,
            PartialCredentialsError,
        )

        code = _code(error)
        if code == "NoSuchBucket":
            return BlobStoreError(self._no_bucket())
        if code in _REFUSED:
            return BlobStoreError(
                f"the S3 service refused to {doing} in bucket {self.bucket!r} ({code}): check "
                "the credentials ([blobs] access_key_id_env, secret_access_key_env) and "
                "their permissions"
            )
        if isinstance(error, NoCredentialsError | PartialCredentialsError):
            return BlobStoreError(
                "no S3 credentials found: set the variables [blobs] access_key_id_env and "
                "secret_access_key_env name (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
            )
        if isinstance(error, ConnectionError):
            where = self.endpoint_url or "the S3 service"
            return BlobStoreError(f"cannot reach {where} to {doing}: {error}")
        if isinstance(error, ClientError):
            message = error.response.get("Error", {}).get("Message") or ""
            return BlobStoreError(
                f"the S3 service could not {doing} in bucket {self.bucket!r}: {code} {message}"
            )
        return BlobStoreError(f"the S3 blob store could not {doing}: {error}")


def _code(error: Exception) -> str:
    """The S3 error code of a boto3 ``ClientError`` (the HTTP status for a HEAD); else ""."""
    response = getattr(error, "response", None)
    if not isinstance(response, dict):
        return ""
    return str(response.get("Error", {}).get("Code", ""))
