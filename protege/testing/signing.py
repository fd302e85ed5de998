"""DKIM keys and signatures for tests and demos: mail that proves its sender without the internet.

A test makes a key, pins its public half as a DNS record (``resolver`` records, or
``[mail.authentication.dns]``), and signs the mail it sends, so the gateway authenticates
the sender exactly as it would a real one's.
"""

from __future__ import annotations

import base64
import functools
from typing import Literal

import attrs


@attrs.frozen(repr=False)
class DkimKey:
    """A DKIM signing key of ``domain`` under ``selector``: ``record`` is the TXT record to
    publish at ``name``, ``sign(raw)`` returns ``raw`` with a DKIM-Signature on top."""

    domain: str
    selector: str
    algorithm: Literal["rsa-sha256", "ed25519-sha256", "rsa-sha1"]
    private_key: bytes  # PEM for RSA, base64 of the seed for Ed25519
    record: str

    def __repr__(self) -> str:
        return f"DkimKey({self.selector}._domainkey.{self.domain}, {self.algorithm})"

    @property
    def name(self) -> str:
        """The DNS name the record is published at."""
        return f"{self.selector}._domainkey.{self.domain}"

    @classmethod
    def generate(
        cls,
        domain: str,
        selector: str = "protege",
        *,
        algorithm: Literal["rsa-sha256", "ed25519-sha256", "rsa-sha1"] = "rsa-sha256",
        bits: int = 2048,
    ) -> DkimKey:
        """A new key (RSA of ``bits`` bits, or Ed25519) for ``domain``."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

        if algorithm == "ed25519-sha256":
            key = ed25519.Ed25519PrivateKey.generate()
            seed = key.private_bytes(
                serialization.Encoding.Raw,
                serialization.PrivateFormat.Raw,
                serialization.NoEncryption(),
            )
            public = key.public_key().public_bytes(
                serialization.Encoding.Raw, serialization.PublicFormat.Raw
            )
            record = f"v=DKIM1; k=ed25519; p={base64.b64encode(public).decode()}"
            return cls(domain, selector, algorithm, base64.b64encode(seed), record)
        rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
        pem = rsa_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
        return cls.from_pem(domain, selector, pem, algorithm=algorithm)

    @classmethod
    def from_pem(
        cls,
        domain: str,
        selector: str,
        pem: bytes,
        *,
        algorithm: Literal["rsa-sha256", "rsa-sha1"] = "rsa-sha256",
    ) -> DkimKey:
        """An RSA key read from its PEM form (a demo's key kept in a file)."""
        from cryptography.hazmat.primitives import serialization

        key = serialization.load_pem_private_key(pem, password=None)
        der = key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        record = f"v=DKIM1; k=rsa; p={base64.b64encode(der).decode()}"
        return cls(domain, selector, algorithm, pem, record)

    def sign(
        self,
        raw: bytes,
        *,
        domain: str | None = None,
        length: bool = False,
        headers: tuple[str, ...] = ("From", "To", "Subject", "Date", "Message-ID"),
        expires_in: int | None = None,
    ) -> bytes:
        """``raw`` with this key's DKIM-Signature on top (``domain`` overrides ``d=``, for a
        signature that does not match the key's own domain; ``length`` adds ``l=``;
        ``expires_in`` adds ``x=`` that many seconds from now, negative for the past)."""
        import time

        expires = None if expires_in is None else int(time.time()) + expires_in
        signer = _signer_class()(raw, signature_algorithm=self.algorithm.encode(), minkey=0)
        signer.expires = expires
        text = "\n" + raw.decode("utf-8", "replace").lower()
        present = [h for h in headers if f"\n{h.lower()}:" in text]
        signature = signer.sign(
            self.selector.encode(),
            (domain or self.domain).encode(),
            self.private_key,
            include_headers=[h.encode() for h in present],
            length=length,
        )
        return signature + raw


@functools.cache
def _signer_class() -> type:
    import dkim

    class Signer(dkim.DKIM):
        """dkimpy's signer, able to add ``x=`` (it has no parameter for it)."""

        expires: int | None = None

        def gen_header(self, fields, *args, **kwargs):  # type: ignore[no-untyped-def]
            if self.expires is not None and fields[-1][0] == b"b":
                fields = [*fields[:-1], (b"x", str(self.expires).encode()), fields[-1]]
            return super().gen_header(fields, *args, **kwargs)

    return Signer
