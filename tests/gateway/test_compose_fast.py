"""Plain mail is written directly, byte for byte as the email package would write it, and
everything else is still written by the email package; either way what goes out is checked."""

import random
import string

import pytest

from protege.gateway.compose import (
    DeliveryRefused,
    Outgoing,
    difference,
    package_bytes,
    plain_bytes,
    render,
)

CASES = 3000
DATE = "Mon, 30 Nov 2026 16:38:51 -0000"
ATEXT = string.ascii_letters + string.digits + "!#$%&'*+/=?^_`{|}~-"
PRINTABLE = "".join(chr(c) for c in range(0x20, 0x7F))
NAMES = [
    "",
    "Sundae",
    "Sundae Bot",
    "O'Brien & Co",
    "J. Smith",
    '"Quoted" Name',
    "Smith, Jane",
    "two  spaces",
    " leading",
    "trailing ",
    "Zoë",
    "=?utf-8?q?Bob?=",
    "a=?b",
    "x" * 60,
    "(comment)",
    "tab\there",
]
ADDRESSES = [
    "a@b.c",
    "jane.doe@mail.acme.example",
    "o'hara+tag@x.io",
    "x{y}|z~@e.f",
    '"quoted"@x.io',
    "a..b@x.io",
    ".a@x.io",
    "a.@x.io",
    "a@[192.0.2.1]",
    "a@b_c.io",
    "a@b..c",
    "nobody",
    "a@b@c.d",
    "a=?b@c.d",
    "zoë@x.io",
    "a@bücher.example",
    "long" * 15 + "@x.io",
]
IDS = [
    "<0123456789abcdef0123456789abcdef@thescoop.example>",
    "<a.b@c>",
    "<a(b)@c>",
    "<a@[c]>",
    '<"a"@c>',
    "<a..b@c>",
    "<x=?y@c>",
    "<" + "i" * 80 + "@c>",
    "no-brackets@c",
    "<a b@c>",
]
DATES = [
    DATE,
    "Tue, 01 Dec 2026 00:00:00 +0100",
    "Tue, 1 Dec 2026 00:00:00 +0100",
    "Mon, 01 Dec 2026 00:00:00 +0100",
    "Tue, 01 Dec 2026 00:00:00 +0000",
    "01 Dec 2026 00:00:00 -0000",
    "Tue, 01 Dec 2026 00:00:00 GMT",
    "not a date",
    "",
]
BODY_LINES = [
    "",
    "Thanks for writing \u2014 your order left on Friday and should reach you by Tuesday, "
    "we\u2019re sure.",
    "\u4f60\u597d\uff0c\u8c22\u8c22\u4f60\u7684\u6765\u4fe1\u3002" * 6,
    "ends in a space before the fold " + "v" * 44 + " ",
    "Hello,",
    "Thanks for the note.  Two spaces.",
    "trailing spaces   ",
    "\ttabbed",
    "From the start",
    ".",
    "-- ",
    "x" * 77,
    "y" * 78,
    "=?utf-8?q?x?=",
    "caf\u00e9",
    "form\x0cfeed",
    "vertical\x0btab",
    "nul\x00",
    "z" * 79,
    "w" * 200,
]


ODD = 0.08  # how often each value is drawn from everything rather than from plain values


def _text(rng: random.Random, alphabet: str, longest: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, longest)))


def _pick(rng: random.Random, values: list[str], plain: int) -> str:
    """One of the first ``plain`` values, or now and then any of them."""
    return rng.choice(values if rng.random() < ODD else values[:plain])


def _words(rng: random.Random, longest: int) -> str:
    """Words and single spaces, now and then with something outside the plain subset."""
    words = (_text(rng, PRINTABLE[1:], 12) or "w" for _ in range(rng.randint(0, 9)))
    text = " ".join(words)[: rng.randint(0, longest)].strip()
    if rng.random() < ODD * 2:
        spot = rng.randint(0, len(text))
        odd = rng.choice(["=?", "  ", "\t", "\u00e9", "\x7f", " ", "\r\n", "\x00"])
        text = text[:spot] + odd + text[spot:]
    return text


def _address(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return _pick(rng, ADDRESSES, 4)
    local = ".".join(_text(rng, ATEXT, 8) or "a" for _ in range(rng.randint(1, 3)))
    return f"{local}@{_text(rng, 'abc-', 8) or 'd'}.example"


def _name(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return _pick(rng, NAMES, 4)
    return " ".join(_text(rng, ATEXT, 12) or "a" for _ in range(rng.randint(1, 5)))


def _body(rng: random.Random) -> str:
    lines = [_pick(rng, BODY_LINES, 10) for _ in range(rng.randint(0, 8))]
    ending = rng.choice(["\n", "\n", "\r\n", "\r" if rng.random() < ODD else "\n"])
    return ending.join(lines) + rng.choice(["", "\n", "\n\n", "\r\n"])


def _ids(rng: random.Random) -> tuple[str, ...]:
    return tuple(_pick(rng, IDS, 2) for _ in range(rng.choice([0, 0, 1, 2])))


def generated(rng: random.Random) -> Outgoing:
    """One mail from ``rng``: often plain, often with a value outside the plain subset."""
    return Outgoing(
        sender_name=_name(rng),
        sender=_address(rng),
        to=tuple(_address(rng) for _ in range(rng.randint(0, 3))),
        cc=tuple(_address(rng) for _ in range(rng.choice([0, 0, 1, 2]))),
        subject=_words(rng, rng.choice([20, 69, 70, 90])),
        date=_pick(rng, DATES, 2),
        message_id=_pick(rng, IDS, 2),
        in_reply_to=rng.choice([None, _pick(rng, IDS, 2)]),
        references=_ids(rng),
        loop=rng.choice([0, 1, 7, 123456, -1]),
        body=_body(rng),
        attachments=(("a.txt", "text/plain", b"a"),) if rng.random() < ODD else (),
        reply_to=tuple(_address(rng) for _ in range(rng.choice([0, 0, 0, 1, 2]))),
    )


def plain(**changes: object) -> Outgoing:
    """A plain reply (within the subset), with ``changes``."""
    values: dict[str, object] = {
        "sender_name": "Sundae",
        "sender": "sundae@thescoop.example",
        "to": ("mara@thescoop.com",),
        "cc": (),
        "subject": "Re: Friday's order",
        "date": DATE,
        "message_id": IDS[0],
        "in_reply_to": "<1@thescoop.com>",
        "references": ("<1@thescoop.com>",),
        "loop": 1,
        "body": "Hello Mara,\n\nYes, Friday works.\n",
    }
    return Outgoing(**{**values, **changes})  # type: ignore[arg-type]


def test_plain_mail_is_written_byte_for_byte_as_the_email_package_writes_it():
    rng = random.Random(20261130)
    written = 0
    for _ in range(CASES):
        outgoing = generated(rng)
        direct = plain_bytes(outgoing)
        if direct is not None:
            written += 1
            assert direct == package_bytes(outgoing), outgoing
    # The generator has to exercise both paths for the comparison to mean anything.
    assert CASES // 4 < written < CASES * 3 // 4


def test_plain_mail_written_directly_reads_back_as_meant_and_is_what_render_gives():
    rng = random.Random(5322)
    for _ in range(CASES // 10):
        outgoing = plain(
            sender_name=rng.choice(["", "Sundae", "Sundae Bot 2", "O'Brien & Co"]),
            to=tuple(rng.choice(ADDRESSES[:4]) for _ in range(rng.randint(1, 2))),
            cc=tuple(rng.choice(ADDRESSES[:4]) for _ in range(rng.randint(0, 1))),
            reply_to=tuple(rng.choice(ADDRESSES[:2]) for _ in range(rng.randint(0, 1))),
            subject=_words(rng, 40).replace("=?", "").replace("  ", " ").strip(),
            in_reply_to=rng.choice([None, IDS[1]]),
            references=IDS[1:2] * rng.randint(0, 1),
            body="\n".join(rng.choice(BODY_LINES[:10]) for _ in range(rng.randint(0, 6))),
        )
        direct = plain_bytes(outgoing)
        if direct is None:  # the rare draw with something odd in it
            continue
        assert difference(direct, outgoing) is None
        assert render(outgoing) == direct


def test_a_header_line_of_78_characters_is_written_directly_and_one_of_79_is_folded():
    fits = plain(subject="s" * (78 - len("Subject: ")))
    folds = plain(subject="s " * 34 + "ss")
    assert len(folds.subject) == 78 - len("Subject: ") + 1

    assert plain_bytes(fits) == package_bytes(fits)
    assert plain_bytes(folds) is None
    assert b"\r\n s" in package_bytes(folds)


def test_a_body_line_of_78_characters_goes_as_7bit_and_one_of_79_as_quoted_printable():
    fits = plain(body="b" * 78 + "\n" + "c" * 78)
    longer = plain(body="b" * 79 + "\n")

    assert plain_bytes(fits) == package_bytes(fits)
    assert b"Content-Transfer-Encoding: 7bit" in package_bytes(fits)
    assert plain_bytes(longer) == package_bytes(longer)
    assert b"Content-Transfer-Encoding: quoted-printable" in package_bytes(longer)


PARAGRAPH = (
    "Thanks for writing \u2014 your order SCP-1042 left on Friday and should reach you by "
    "Tuesday; if it doesn\u2019t, reply here and we\u2019ll send a fresh tub of na\u00efve "
    "vanilla \U0001f366 at once."
)


@pytest.mark.parametrize(
    ("body", "encoding"),
    [
        ("caf\u00e9 au lait\nsee you\n", "8bit"),
        (PARAGRAPH, "quoted-printable"),
        ("\n\n".join([PARAGRAPH] * 8), "quoted-printable"),  # more than the ten sniffed lines
        ("Plain ASCII, but one line of it is long: " + "word " * 30, "quoted-printable"),
        ("trailing space at a soft break " + "x" * 60 + " \nend", "quoted-printable"),
    ],
)
def test_a_reply_as_models_write_them_is_written_directly_as_the_package_would(body, encoding):
    outgoing = plain(body=body)

    assert plain_bytes(outgoing) == package_bytes(outgoing)
    assert f"Content-Transfer-Encoding: {encoding}".encode() in package_bytes(outgoing)
    assert render(outgoing) == plain_bytes(outgoing)  # and it reads back as meant


def test_a_body_base64_would_suit_better_is_left_to_the_package():
    outgoing = plain(body="\u4f60\u597d\uff0c\u8c22\u8c22\u4f60\u7684\u6765\u4fe1\u3002" * 12)

    assert b"Content-Transfer-Encoding: base64" in package_bytes(outgoing)
    assert plain_bytes(outgoing) is None


@pytest.mark.parametrize(
    "body",
    ["", "\n", "no final newline", "two\n\n", "crlf\r\nends\r\n", "\n\nlead", "sp  \n\t\n"],
)
def test_line_ends_and_the_final_newline_come_out_as_set_content_writes_them(body):
    outgoing = plain(body=body)

    assert plain_bytes(outgoing) == package_bytes(outgoing)


@pytest.mark.parametrize(
    "changes",
    [
        {"attachments": (("a.txt", "text/plain", b"a"),)},
        {"sender": "zo\u00eb@thescoop.example"},
        {"to": ("mara@b\u00fccher.example",)},
        {"subject": "Re: =?utf-8?q?Hi?="},
        {"subject": "caf\u00e9"},
        {"subject": "tab\there"},
        {"subject": "nul\x00here"},
        {"subject": "two  spaces"},
        {"subject": " leading"},
        {"subject": "trailing "},
        {"sender_name": "J. Smith"},
        {"sender_name": '"Quoted"'},
        {"sender_name": "Smith, Jane"},
        {"sender_name": "Zo\u00eb"},
        {"sender_name": "=?utf-8?q?Bob?="},
        {"sender_name": "two  spaces"},
        {"to": ('"quoted"@thescoop.com',)},
        {"to": ("mara@[192.0.2.1]",)},
        {"to": ("ma..ra@thescoop.com",)},
        {"to": ("mara",)},
        {"cc": ("a=?b@thescoop.com",)},
        {"reply_to": ("a@b_c.example",)},
        {"message_id": "<a(b)@c>"},
        {"message_id": "<x=?y@c>"},
        {"in_reply_to": "<a=?b@c>"},
        {"date": "Tue, 1 Dec 2026 00:00:00 +0100"},
        {"date": "Mon, 01 Dec 2026 00:00:00 +0100"},
        {"date": "Tue, 01 Dec 2026 00:00:00 GMT"},
        {"date": "not a date"},
        {"body": "lone\rcarriage return\n"},
        {"body": "form\x0cfeed\n"},
        {"body": "line\u2028separator\n"},
        {"body": "lone \ud800 surrogate\n"},
        {"references": ("<" + "r" * 70 + "@c>",)},
    ],
)
def test_mail_outside_the_plain_subset_is_left_to_the_email_package(changes):
    outgoing = plain(**changes)

    assert plain_bytes(outgoing) is None


def test_control_characters_are_written_by_the_email_package_not_directly():
    outgoing = plain(subject="bell\x07")

    assert plain_bytes(outgoing) is None
    assert render(outgoing) == package_bytes(outgoing)


@pytest.mark.parametrize(
    "subject",
    ["=?utf-8?q?Hi=0D=0AReply-To:_thief@evil.example?=", "Hi\r\nBcc: thief@evil.example"],
)
def test_hostile_subjects_still_go_through_the_email_package_and_are_refused(subject):
    outgoing = plain(subject=subject)

    assert plain_bytes(outgoing) is None
    with pytest.raises(DeliveryRefused):
        render(outgoing)


def test_plain_mail_written_directly_is_still_refused_when_it_would_not_read_back():
    # A space inside an id is plain text, so written directly, and reads back as two ids.
    outgoing = plain(references=("<a b@c>",))

    assert plain_bytes(outgoing) is not None
    with pytest.raises(DeliveryRefused, match="References"):
        render(outgoing)
