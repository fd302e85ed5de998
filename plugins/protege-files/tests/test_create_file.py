"""create_file: formats, names, validation and limits; and a created file sent by mail."""

import email
from email import policy
from pathlib import Path

import pytest

from protege.blobs import read as read_blob
from protege.models import Blob
from protege.testing import run_reply, run_tool, say, tool_call


@pytest.fixture
def create(protege_app, context_for, sundae):
    def call(config=None, **arguments):
        context = context_for(sundae, config=config)
        return run_tool("create_file", context=context, manifest=protege_app.manifest, **arguments)

    return call


@pytest.mark.parametrize(
    ("format", "content", "content_type"),
    [
        ("csv", "order,total\r\nSCP-1042,24.50\r\n", "text/csv; charset=utf-8"),
        ("txt", "Plain words.\n", "text/plain; charset=utf-8"),
        ("md", "# Title\n", "text/markdown; charset=utf-8"),
        ("html", "<p>Refunded</p>", "text/html; charset=utf-8"),
        ("json", '{"refunded": ["SCP-1042"]}', "application/json"),
        (
            "svg",
            '<svg xmlns="http://www.w3.org/2000/svg"><defs><linearGradient id="g"/></defs>'
            '<rect width="10" height="10" fill="url(#g)"/></svg>',
            "image/svg+xml",
        ),
    ],
)
@pytest.mark.usefixtures("blob_store")  # in each blob store
def test_each_format_is_stored_as_the_agents_own_file(
    create, sundae, protege_app, format, content, content_type
):
    result = create(format=format, filename="report", content=content)
    assert result.ok, result.reason
    blob = Blob.get(Blob.token == result.data["blob_id"])
    assert (blob.filename, blob.content_type, blob.agent_id) == (
        f"report.{format}",
        content_type,
        sundae.id,
    )
    assert read_blob(blob, protege_app.config) == content.encode()
    assert result.data == {
        "blob_id": blob.token,
        "filename": f"report.{format}",
        "size": len(content.encode()),
        "content_type": content_type,
    }


@pytest.mark.parametrize(
    ("requested", "format", "stored"),
    [
        ("../../etc/passwd", "txt", "passwd.txt"),
        ("C:\\Users\\mara\\notes", "md", "notes.md"),
        ("summary.csv", "csv", "summary.csv"),
        ("summary.exe", "csv", "summary.exe.csv"),
        ("evil\r\nBcc: x@y.z", "txt", "evilBcc_ x_y.z.txt"),
        ("\x00\x1b[31m", "json", "31m.json"),
        ("...", "txt", "file.txt"),
    ],
)
def test_filenames_are_made_safe_and_given_the_formats_extension(create, requested, format, stored):
    content = "{}" if format == "json" else "x"
    assert create(format=format, filename=requested, content=content).data["filename"] == stored


def test_a_long_filename_is_cut_to_the_limit_keeping_the_extension(create, configured):
    name = create(format="txt", filename="a" * 500, content="x").data["filename"]
    assert name == "a" * 96 + ".txt"
    short = create(
        config=configured(max_filename_chars=20), format="txt", filename="b" * 50, content="x"
    )
    assert short.data["filename"] == "b" * 16 + ".txt"


@pytest.mark.parametrize(
    ("format", "content", "reason"),
    [
        # What follows the colon is the json module's own words, which differ by version.
        ("json", '{"a": 1,}', "this is not valid json: "),
        ("json", "", "this is not valid json: "),
        ("csv", 'a,b\n"open quote,c\n', "this is not valid csv: unexpected end of data"),
        ("csv", "a,b\n1,2,3\n", "this is not valid csv: its rows have different numbers"),
        ("csv", "  \n", "this is not valid csv: it is empty"),
        ("txt", "nul\x00byte", "this is not valid txt: it holds a NUL character"),
        ("svg", "<svg", "this is not valid svg: it is not well-formed XML"),
        ("svg", "<html/>", "this is not valid svg: its root element is <html>, not <svg>"),
        (
            "svg",
            '<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
            "this is not valid svg: it holds a <script> element",
        ),
        (
            "svg",
            '<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>',
            "this is not valid svg: <svg> has an event handler (onload)",
        ),
        (
            "svg",
            '<svg xmlns="http://www.w3.org/2000/svg" xmlns:x="http://www.w3.org/1999/xlink">'
            '<image x:href="https://evil.example/track.png"/></svg>',
            "this is not valid svg: <image> refers to something outside the file (href)",
        ),
        (
            "svg",
            '<svg xmlns="http://www.w3.org/2000/svg"><a href="javascript:alert(1)">x</a></svg>',
            "this is not valid svg: <a> refers to something outside the file (href)",
        ),
        (
            "svg",
            '<svg xmlns="http://www.w3.org/2000/svg"><rect style="fill:url(\'https://e.x/a\')"/>'
            "</svg>",
            "this is not valid svg: <rect> refers to something outside the file (url())",
        ),
        (
            "svg",
            '<svg xmlns="http://www.w3.org/2000/svg"><style>@import "https://e.x/a.css";</style>'
            "</svg>",
            "this is not valid svg: its style sheet refers to something outside the file",
        ),
        (
            "svg",
            '<svg xmlns="http://www.w3.org/2000/svg"><foreignObject><p>x</p></foreignObject></svg>',
            "this is not valid svg: it holds a <foreignObject> element",
        ),
        (
            "svg",
            '<svg xmlns="http://www.w3.org/2000/svg"><a><set attributeName="href" '
            'to="javascript:alert(1)"/></a></svg>',
            "this is not valid svg: <set> changes a reference (href)",
        ),
        (
            "svg",
            '<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
            "<svg>&x;</svg>",
            "this is not valid svg: it declares a document type or entities",
        ),
        *[
            (
                "svg",
                f'<svg xmlns="http://www.w3.org/2000/svg">{drawing}</svg>',
                f"this is not valid svg: {reason}",
            )
            for drawing, reason in [
                (
                    '<rect style="fill:\\75rl(https://evil.example/t.svg#p)"/>',
                    "<rect> refers to something outside the file",
                ),
                (
                    "<style>rect{background:\\75rl(https://evil.example/t.png)}</style>",
                    "its style sheet refers to something outside the file",
                ),
                (
                    '<style>@\\69mport "https://evil.example/x.css";</style>',
                    "its style sheet refers to something outside the file",
                ),
                (
                    "<rect style=\"background-image:image-set('https://evil.example/t.png' 1x)\"/>",
                    "<rect> refers to something outside the file",
                ),
            ]
        ],
    ],
)
def test_invalid_content_is_refused_and_nothing_is_stored(create, format, content, reason):
    before = Blob.select().count()
    result = create(format=format, filename="bad", content=content)
    assert not result.ok
    assert result.reason.startswith(reason), result.reason
    assert Blob.select().count() == before


def test_content_over_the_limit_is_refused_naming_it(create, configured):
    assert create(format="txt", filename="x", content="a" * (1024 * 1024)).ok
    result = create(format="txt", filename="x", content="a" * (1024 * 1024 + 1))
    assert result.reason == (
        "the content is 1048577 bytes; a created file holds at most 1048576 "
        "(max_created_bytes in [plugins.protege-files])"
    )
    small = create(
        config=configured(max_created_bytes=10), format="txt", filename="x", content="é" * 6
    )
    assert small.reason.startswith("the content is 12 bytes; a created file holds at most 10")


def test_an_unknown_format_is_refused_by_the_schema(create):
    result = create(format="exe", filename="x", content="MZ")
    assert not result.ok
    assert result.reason.startswith("the arguments do not fit the input schema: format:")


@pytest.mark.usefixtures("blob_store")
def test_a_created_file_is_attached_by_send_email_and_in_the_outbox(
    sundae, protege_app, scripted_model, create
):
    from protege.models import Toolkit

    sundae.grant(Toolkit.create(name="Mail", member_tool_ids=["send_email"]))
    csv_text = "order,total\r\nSCP-1042,24.50\r\n"
    created = create(format="csv", filename="refunds", content=csv_text)
    scripted_model.script(
        tool_call(
            "send_email",
            mode="reply",
            body="The list is attached.",
            attachments=[created.data["blob_id"]],
        ),
        say("Sent."),
    )
    run = run_reply(
        sundae,
        sender="mara@thescoop.com",
        subject="Refunds",
        body="Send me the refund list.",
        installation=protege_app,
    )
    assert run.status == "done"
    delivery = next(e for e in run.timeline() if e.kind == "delivery").payload
    assert delivery["status"] == "queued", delivery
    (eml,) = Path(protege_app.data_dir, "outbox").glob("*.eml")
    mail = email.message_from_bytes(eml.read_bytes(), policy=policy.default)
    assert mail["To"] == "mara@thescoop.com"
    (attachment,) = mail.iter_attachments()
    assert attachment.get_filename() == "refunds.csv"
    assert attachment.get_content_type() == "text/csv"
    assert attachment.get_content() == csv_text
