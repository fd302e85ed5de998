"""A stub DNS and signing keys for the authentication tests: real signatures, no network."""

from __future__ import annotations

import pytest

from protege.testing import DkimKey


class StubDns:
    """A resolver answering from a dict of (name, type) → records; names in ``failing``
    time out. Counts what it was asked."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], list[str]] = {}
        self.failing: set[str] = set()
        self.asked: list[tuple[str, str]] = []

    def add(self, name: str, rdtype: str, *records: str) -> None:
        self.records.setdefault((name.lower(), rdtype), []).extend(records)

    def publish(self, key: DkimKey) -> DkimKey:
        self.add(key.name, "TXT", key.record)
        return key

    def __call__(self, name: str, rdtype: str) -> list[str]:
        name = name.lower().rstrip(".")
        self.asked.append((name, rdtype))
        if name in self.failing:
            raise TimeoutError(f"no answer for {name}")
        return list(self.records.get((name, rdtype), []))


@pytest.fixture
def dns() -> StubDns:
    return StubDns()


@pytest.fixture(scope="session")
def scoop_key() -> DkimKey:
    return DkimKey.generate("thescoop.com", "s2026")


@pytest.fixture(scope="session")
def other_key() -> DkimKey:
    return DkimKey.generate("evil.example", "s1")


def mail(
    sender: str = "Mara <mara@thescoop.com>",
    body: str = "Please refund order 1042.\r\n",
    extra: str = "",
) -> bytes:
    """A plain mail from ``sender`` to Sundae."""
    return (
        f"From: {sender}\r\nTo: sundae@thescoop.com\r\nSubject: Refund\r\n"
        f"Date: Tue, 01 Dec 2026 10:00:00 +0000\r\nMessage-ID: <m1@thescoop.com>\r\n{extra}"
        f"\r\n{body}"
    ).encode()
