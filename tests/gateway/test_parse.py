"""Reading mail: each header of a message is parsed once, however often it is asked for,
and a header protege writes once for all its mail."""

import collections
from email import policy
from email.parser import BytesParser

from protege.gateway import parse
from protege.gateway.parse import HeadersOnce, SharedHeaders

RAW = (
    b"From: Jane <jane@acme.example>\r\nTo: sundae@thescoop.example\r\n"
    b"Subject: =?utf-8?q?Caf=C3=A9?=\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nHi\r\n"
)


class Counting(HeadersOnce):
    def __init__(self) -> None:
        super().__init__()
        self.made: list[str] = []

    def make(self, name, value):
        self.made.append(name)
        return super().make(name, value)


def test_a_header_asked_for_again_is_not_parsed_again():
    registry = Counting()
    message = BytesParser(policy=policy.default.clone(header_factory=registry)).parsebytes(RAW)
    for _ in range(3):
        assert message.get_content_type() == "text/plain"
        assert str(message["Subject"]) == "Café"
        assert message["From"].addresses[0].username == "jane"
    assert message.get_content().strip() == "Hi"
    assert sorted(set(registry.made)) == sorted(registry.made)  # each name once
    assert {"Subject", "From", "Content-Type"} <= set(registry.made)


def test_the_same_name_with_another_value_is_its_own_header():
    registry = HeadersOnce()
    first, second = registry("Subject", "one"), registry("Subject", "two")
    assert (str(first), str(second)) == ("one", "two")
    assert registry("Subject", "one") is first


class CountingShared(SharedHeaders):
    made: list[str] = []

    def make(self, name, value):
        CountingShared.made.append(value)
        return super().make(name, value)


def test_headers_protege_writes_are_parsed_once_for_every_message_of_the_process(monkeypatch):
    monkeypatch.setattr(SharedHeaders, "_shared", collections.OrderedDict())
    CountingShared.made = []
    first = CountingShared()("From", "Sundae <sundae@thescoop.example>")
    again = CountingShared()("From", "Sundae <sundae@thescoop.example>")  # another message
    assert again is first
    assert again.addresses[0].display_name == "Sundae"
    assert CountingShared.made == ["Sundae <sundae@thescoop.example>"]


def test_only_the_most_recently_used_shared_headers_are_kept(monkeypatch):
    monkeypatch.setattr(SharedHeaders, "_shared", collections.OrderedDict())
    monkeypatch.setattr(parse, "SHARED_HEADERS", 2)
    CountingShared.made = []
    registry = CountingShared()
    registry("To", "one")
    registry("To", "two")
    registry("To", "one")  # used again: now the most recent
    registry("To", "three")  # "two" goes
    CountingShared()("To", "one")
    CountingShared()("To", "two")
    assert CountingShared.made == ["one", "two", "three", "two"]


def test_a_long_value_is_parsed_but_not_shared(monkeypatch):
    monkeypatch.setattr(SharedHeaders, "_shared", collections.OrderedDict())
    long = "x" * (parse.SHARED_VALUE_LIMIT + 1)
    SharedHeaders()("Subject", long)
    assert not SharedHeaders._shared
