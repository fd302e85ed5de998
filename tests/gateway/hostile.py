"""The hostile-mail corpus: mail an attacker (or a broken mail system) sends, and what protege
must make of it.

Each case ends one of three ways, on every path in: ``answered`` (stored, a run queued),
``ignored`` (stored and flagged, no run), or ``refused`` (a 5xx with a reason, nothing
stored). None ends in 451, and none leaves a file no row points at.
"""

from __future__ import annotations

import base64
import smtplib
from pathlib import Path

import attrs
from click.testing import CliRunner

from protege.blobs import blob_path
from protege.cli import cli
from protege.config import load_config
from protege.gateway.smtp import free_port, start_gateway
from protege.models import Blob

AGENT = "sundae@thescoop.example"
OPERATOR = "mara@thescoop.com"
ATTACKER = "attacker@evil.example"


@attrs.frozen
class Case:
    """One hostile message and the outcome it must have."""

    name: str
    raw: bytes
    outcome: str  # answered, ignored or refused
    flag: str | None = None  # a text one of the stored flags must contain
    code: int | None = None  # the SMTP code of a refusal
    envelope_sender: str = "jane@acme.com"
    smtputf8: bool = False
    paths: tuple[str, ...] = ("receive", "smtp")  # a file has no envelope sender


def mail(
    *headers: bytes | str,
    body: bytes | str = b"Hello.\r\n",
    sender: bytes | str | None = f"Jane <{'jane@acme.com'}>",
) -> bytes:
    """An email from header lines; ``sender`` None leaves out From."""
    lines = [] if sender is None else [b"From: " + _bytes(sender)]
    lines += [_bytes(h) for h in headers]
    if not any(line.lower().startswith(b"to:") for line in lines):
        lines.append(b"To: " + AGENT.encode())
    if not any(line.lower().startswith(b"message-id:") for line in lines):
        lines.append(b"Message-ID: <case@acme.example>")
    if not any(line.lower().startswith(b"subject:") for line in lines):
        lines.append(b"Subject: a case")
    return b"\r\n".join(lines) + b"\r\n\r\n" + _bytes(body)


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8")


def _encoded(text: str) -> str:
    return "=?utf-8?b?" + base64.b64encode(text.encode()).decode() + "?="


SPOOFED_FROM = [
    f"{OPERATOR} <{ATTACKER}>",
    f"<{OPERATOR}> <{ATTACKER}>",
    f"{OPERATOR} (x <{ATTACKER}>",
    f"{OPERATOR}, {ATTACKER}",
    f"Mara <{OPERATOR}>\r\n {ATTACKER}",
    f"{ATTACKER}\r\n <{OPERATOR}>",
    f"team: {OPERATOR};",
    f"team: {OPERATOR}, {ATTACKER};",
    f"=?utf-8?q?Mara=0D=0A?= <{OPERATOR}>",
    f"Mara\x07 <{OPERATOR}>",
    f'"{OPERATOR}" <{OPERATOR}>> <{ATTACKER}>',
    "",
]

REPORT = (
    b"From: postmaster@acme.com\r\nTo: " + AGENT.encode() + b"\r\n"
    b"Subject: Undeliverable: Melted\r\nMessage-ID: <ndr@acme.com>\r\n"
    b'Content-Type: multipart/report; report-type=delivery-status; boundary="b"\r\n\r\n'
    b"--b\r\nContent-Type: text/plain\r\n\r\nDelivery has failed to these recipients.\r\n"
    b"--b\r\nContent-Type: message/delivery-status\r\n\r\n"
    b"Reporting-MTA: dns; mail.acme.com\r\n\r\nFinal-Recipient: rfc822; x@acme.com\r\n"
    b"Action: failed\r\nStatus: 5.1.1\r\n\r\n--b--\r\n"
)

FORWARDED = (
    b"From: Jane <jane@acme.com>\r\nTo: " + AGENT.encode() + b"\r\n"
    b"Subject: Fwd\r\nMessage-ID: <fwd@acme.com>\r\nContent-Type: message/rfc822\r\n\r\n"
    b"From: someone@acme.com\r\nSubject: inner\r\n\r\nThe text inside.\r\n"
)


def cases() -> list[Case]:
    """Every case of the corpus."""
    found = [
        Case(f"spoofed-from-{n}", mail(sender=shape), "ignored", "ambiguous sender")
        for n, shape in enumerate(SPOOFED_FROM)
    ]
    found += [
        Case("no-from", mail(sender=None), "ignored", "ambiguous sender: no From header"),
        Case(
            "two-from-headers",
            mail(f"From: {ATTACKER}", sender=OPERATOR),
            "ignored",
            "ambiguous sender: 2 From headers",
        ),
        Case(
            "encoded-word-display-name-is-only-a-name",
            mail(sender=f"{_encoded(OPERATOR)} <{ATTACKER}>"),
            "answered",
        ),
        Case(
            "idn-raw-utf8",
            mail(sender="Zoë <zoë@café.example>"),
            "answered",
            smtputf8=True,
            envelope_sender="zoë@café.example",
        ),
        Case(
            "idn-encoded-word-name",
            mail(sender=f"{_encoded('José')} <jose@xn--caf-dma.example>"),
            "answered",
        ),
        Case(
            "non-ascii-display-name-raw",
            mail(sender="Jürgen Groß <juergen@acme.com>"),
            "answered",
            smtputf8=True,
        ),
        Case("loop-not-a-number", mail("X-Protege-Loop: many"), "ignored", "loop: invalid"),
        Case("loop-5000-digits", mail("X-Protege-Loop: " + "9" * 5000), "ignored", "loop: invalid"),
        Case(
            "message-id-over-998",
            mail("Message-ID: <" + "a" * 1200 + "@x>"),
            "answered",
            "synthetic Message-ID",
        ),
        Case(
            "display-name-over-998",
            mail(sender='"' + "N" * 1500 + '" <jane@acme.com>'),
            "answered",
            "display name cut",
        ),
        Case(
            "from-over-two-header-lines",
            mail(sender='"' + "N" * 2500 + '" <jane@acme.com>'),
            "ignored",
            "ambiguous sender",
        ),
        Case(
            "in-reply-to-and-references-over-998",
            mail("In-Reply-To: <" + "r" * 2000 + "@x>", "References: <" + "r" * 2000 + "@x>"),
            "answered",
        ),
        Case(
            "content-type-over-255",
            mail(
                'Content-Type: multipart/mixed; boundary="b"',
                body=(
                    "--b\r\nContent-Type: text/plain\r\n\r\nsee file\r\n--b\r\n"
                    "Content-Type: application/" + "x" * 300 + "\r\n"
                    "Content-Disposition: attachment; filename=a.bin\r\n\r\nxyz\r\n--b--\r\n"
                ),
            ),
            "answered",
            "content type replaced",
        ),
        Case(
            "body-too-big-for-a-tsvector",
            mail(body=" ".join(f"w{n:07d}x" for n in range(120_000)).encode()),
            "answered",
        ),
        Case(
            "subject-injects-headers-when-decoded-twice",
            mail("Subject: " + _encoded("=?utf-8?q?Hi=0D=0AReply-To:_thief@evil.example?=")),
            "answered",
        ),
        Case(
            "subject-decodes-to-cr-lf",
            mail("Subject: =?utf-8?q?Hi=0D=0ABcc:_thief@evil.example?="),
            "answered",
            "control characters removed from Subject",
        ),
        Case(
            "subject-280k-of-encoded-words",
            mail("Subject: " + " ".join(["=?utf-8?q?abcdefghijklmnop?="] * 10_000)),
            "refused",
            code=552,
        ),
        Case(
            "to-40000-addresses",
            mail("To: " + ", ".join(f"u{n}@acme.com" for n in range(40_000))),
            "refused",
            code=552,
        ),
        Case(
            "to-1500-short-addresses",
            mail("Cc: " + ",".join(f"{n}@a.b" for n in range(1_500))),
            "refused",
            code=552,
        ),
        Case(
            "references-200000",
            mail("References: " + " ".join(f"<{n}@x>" for n in range(200_000))),
            "refused",
            code=552,
        ),
        Case(
            "references-many-kept-bounded",
            mail("References: " + " ".join(f"<{n}@x>" for n in range(2_000))),
            "answered",
            "references cut",
        ),
        Case("to-nested-comments", mail("Cc: " + "(" * 5_000 + " x@y.z"), "answered"),
        Case("cc-30000-comments", mail("Cc: " + "(a)" * 30_000), "answered"),
        Case("to-50000-words", mail("Cc: " + "a," * 50_000), "answered", "left out"),
        Case(
            "content-type-too-intricate",
            mail("Content-Type: text/plain; " + "(a)" * 30_000),
            "answered",
            "too intricate",
        ),
        Case(
            "200000-mime-part-lines",
            mail('Content-Type: multipart/mixed; boundary="b"', body="--b\r\n\r\nx\r\n" * 200_000),
            "refused",
            code=552,
        ),
        Case(
            "3000-nested-multiparts",
            mail(
                'Content-Type: multipart/mixed; boundary="b"',
                body='--b\r\nContent-Type: multipart/mixed; boundary="b"\r\n\r\n' * 3_000,
            ),
            "refused",
            code=552,
        ),
        Case(
            "part-header-with-1000-parameters",
            mail(
                'Content-Type: multipart/alternative; boundary="b"',
                body="--b\r\nContent-Type: text/plain; "
                + "; ".join(f"a{n}=b" for n in range(1000))
                + "\r\n\r\nhello\r\n--b--\r\n",
            ),
            "answered",
            "too intricate",
        ),
        Case("a-million-and-one-lines", mail(body=b"\n" * 1_000_001), "refused", code=552),
        Case(
            "html-of-20-mb-of-tags",
            mail("Content-Type: text/html", body=b"<b>" * 6_000_000),
            "answered",
            "HTML body read for its first",
        ),
        Case("null-return-path-header", mail("Return-Path: <>"), "ignored", "null return path"),
        Case(
            "null-envelope-sender",
            mail(),
            "ignored",
            "null return path",
            envelope_sender="",
            paths=("smtp",),
        ),
        Case("delivery-status-report", REPORT, "ignored", "report: multipart/report"),
        Case("top-level-message-rfc822", FORWARDED, "answered", "enclosed message"),
        Case(
            "multipart-without-boundary",
            mail("Content-Type: multipart/mixed", body="plain words anyway\r\n"),
            "answered",
            "malformed",
        ),
        Case(
            "unknown-charset",
            mail("Content-Type: text/plain; charset=x-no-such-charset", body="caf\xc3\xa9\r\n"),
            "answered",
            "malformed: body",
        ),
        Case("line-of-5000-bytes", mail(body=b"y" * 5_000 + b"\r\n"), "answered"),
        Case("nul-in-body", mail(body=b"a\x00b\r\n"), "answered", "NUL characters replaced"),
        Case(
            "latin1-bytes-in-subject",
            mail(b"Subject: caf\xe9"),
            "answered",
            "not UTF-8",
        ),
        Case("garbage", b"\x00\xff not an email \xfe", "ignored", "ambiguous sender"),
        Case(
            "too-many-attachments",
            mail(
                'Content-Type: multipart/mixed; boundary="b"',
                body="".join(
                    f"--b\r\nContent-Disposition: attachment; filename={n}.txt\r\n\r\n{n}\r\n"
                    for n in range(20)
                )
                + "--b--\r\n",
            ),
            "refused",
            code=552,
        ),
        Case("auto-reply", mail("Auto-Submitted: auto-replied"), "ignored", "auto-submitted"),
    ]
    return found


def through_receive(raw: bytes) -> tuple[int | None, str]:
    result = CliRunner().invoke(cli, ["receive", "-", "--to", AGENT], input=raw)
    assert "Traceback" not in result.output
    return (None if result.exit_code == 0 else result.exit_code), result.output


def through_smtp(raw: bytes, case, data_dir: Path) -> tuple[int | None, str]:
    controller = start_gateway(load_config(), "127.0.0.1", free_port())
    options = ["SMTPUTF8"] if case.smtputf8 else []
    try:
        with smtplib.SMTP(controller.hostname, controller.port, timeout=60) as client:
            client.sendmail(case.envelope_sender, [AGENT], raw, mail_options=options)
    except smtplib.SMTPResponseException as error:
        return error.smtp_code, error.smtp_error.decode(errors="replace")
    finally:
        controller.stop()
    return None, ""


def assert_no_orphan_files(data_dir: Path) -> None:
    on_disk = {p for p in (data_dir / "blobs").glob("*/*")} if data_dir.exists() else set()
    rows = {blob_path(data_dir, blob.sha256) for blob in Blob.select()}
    assert on_disk == rows
