"""Reading mail: each header of a message is parsed once, however often it is asked for."""

from email import policy
from email.parser import BytesParser

from protege.gateway.parse import HeadersOnce

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
