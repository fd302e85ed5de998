"""Operators' passwords: hashed with scrypt (memory-hard, in the standard library)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

# 16 MiB of memory and about 50 ms per hash: slow for a guesser, quick for one login.
N, R, P = 2**14, 8, 1
SALT_BYTES = 16
KEY_BYTES = 32
MIN_LENGTH = 10


def hash_password(password: str) -> str:
    """The stored form of ``password``: ``scrypt$N$r$p$salt$key``, salt and key in base64."""
    salt = secrets.token_bytes(SALT_BYTES)
    key = _derive(password, salt, N, R, P)
    return "$".join(["scrypt", str(N), str(R), str(P), _b64(salt), _b64(key)])


def verify_password(password: str, stored: str) -> bool:
    """Whether ``password`` is the one ``stored`` was made from (in constant time)."""
    try:
        scheme, n, r, p, salt, key = stored.split("$")
        if scheme != "scrypt":
            return False
        expected = base64.b64decode(key)
        found = _derive(password, base64.b64decode(salt), int(n), int(r), int(p))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(found, expected)


def dummy_verify(password: str) -> None:
    """Spend the time a check would, so an unknown name answers as slowly as a known one."""
    _derive(password, b"\0" * SALT_BYTES, N, R, P)


def _derive(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(
        password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=64 * 1024 * 1024, dklen=KEY_BYTES
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
