"""read_attachment in real runs: exactly what the scripted model was sent, for a model that
reads images and PDFs and for a text-only one."""

import base64
import json
from pathlib import Path

import attrs
import pytest

from protege.mail import attachments_of
from protege.models import Toolkit
from protege.testing import run_reply, say, tool_call, tool_calls

FIXTURES = Path(__file__).parent / "fixtures"
PNG = (FIXTURES / "photo.png").read_bytes()
PDF = (FIXTURES / "receipt.pdf").read_bytes()
FILES = [("photo.png", "image/png", PNG), ("receipt.pdf", "application/pdf", PDF)]

# Each test runs with the local blob store and with S3 (see the root conftest.py).
pytestmark = pytest.mark.usefixtures("blob_store")


@pytest.fixture
def reader(sundae):
    sundae.grant(Toolkit.create(name="Files", member_tool_ids=["read_attachment"]))
    return sundae


def run_with(agent, app, files=FILES, body="The order melted; photo and receipt."):
    """Run ``agent`` on Jane's email carrying ``files`` (blob ids are known only once the
    mail is stored, so a test reads them from this first run and scripts the next)."""
    return run_reply(
        agent,
        sender="jane@acme.com",
        subject="Melted",
        body=body,
        attachments=files,
        installation=app,
    )


def data_url(media_type, data):
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def fence_of(request):
    return request["messages"][0]["content"].split("<<<UNTRUSTED ", 1)[1].split(" ", 1)[0]


def unfenced(content):
    lines = content.splitlines()
    assert lines[0].startswith("<<<UNTRUSTED ")
    assert lines[-1].startswith("<<<END UNTRUSTED ")
    return json.loads("\n".join(lines[1:-1]))


def app_reading(protege_app, *inputs):
    config = protege_app.config
    model = attrs.evolve(config.model, input=("text", *inputs))
    return attrs.evolve(protege_app, config=attrs.evolve(config, model=model))


def test_a_multimodal_model_is_shown_the_pdf_it_asked_for_after_the_tool_message(
    reader, protege_app, scripted_model
):
    app = app_reading(protege_app, "image", "pdf")
    scripted_model.script(say("Looking."))
    first = run_with(reader, app)
    photo, receipt = attachments_of([first.message])[first.message.id]
    request = scripted_model.requests[0]
    fence = fence_of(request)
    content = request["messages"][-1]["content"]
    assert content[1:] == [
        {"type": "text", "text": f"<<<UNTRUSTED {fence} source='email attachments'>>>"},
        {"type": "text", "text": f"Attachment photo.png (blob id {photo.token}):"},
        {"type": "image_url", "image_url": {"url": data_url("image/png", PNG)}},
        {"type": "text", "text": f"Attachment receipt.pdf (blob id {receipt.token}):"},
        {
            "type": "file",
            "file": {"filename": "receipt.pdf", "file_data": data_url("application/pdf", PDF)},
        },
        {"type": "text", "text": f"<<<END UNTRUSTED {fence}>>>"},
    ]
    assert f"- photo.png (image/png, {len(PNG)} bytes, blob id {photo.token})" in content[0]["text"]

    # A reply in the same thread: the earlier files are listed only; reading one shows it.
    scripted_model.script(tool_call("read_attachment", blob_id=receipt.token), say("Refund due."))
    run = run_reply(
        reader,
        sender="jane@acme.com",
        body="Did you see the receipt?",
        reply_to=first.message,
        installation=app,
    )
    assert run.status == "done"
    second = scripted_model.requests[2]
    fence = fence_of(second)
    assistant, tool, files = second["messages"][-3:]
    assert assistant["tool_calls"][0]["function"]["name"] == "read_attachment"
    assert tool["role"] == "tool"
    assert unfenced(tool["content"]) == {
        "ok": True,
        "blob_id": receipt.token,
        "filename": "receipt.pdf",
        "size": len(PDF),
        "content_type": "application/pdf",
        "shown": "the PDF follows, as itself",
    }
    assert files == {
        "role": "user",
        "content": [
            {"type": "text", "text": "The files your tool calls gave back follow."},
            {"type": "text", "text": f"<<<UNTRUSTED {fence} source='tool results'>>>"},
            {
                "type": "text",
                "text": f"receipt.pdf from read_attachment (call {tool['tool_call_id']}):",
            },
            {
                "type": "file",
                "file": {"filename": "receipt.pdf", "file_data": data_url("application/pdf", PDF)},
            },
            {"type": "text", "text": f"<<<END UNTRUSTED {fence}>>>"},
        ],
    }


def test_the_run_cap_counts_attachments_and_tool_files_together(
    reader, protege_app, scripted_model
):
    app = app_reading(protege_app, "image", "pdf")
    config = attrs.evolve(app.config, runs=attrs.evolve(app.config.runs, max_parts_per_run=2))
    app = attrs.evolve(app, config=config)
    scripted_model.script(say("Looking."))
    first = run_with(reader, app)
    photo, _ = attachments_of([first.message])[first.message.id]
    scripted_model.script(
        tool_calls([tool_call("read_attachment", blob_id=photo.token)] * 3), say("Done.")
    )
    run_reply(
        reader, sender="jane@acme.com", body="Again?", reply_to=first.message, installation=app
    )
    content = scripted_model.requests[2]["messages"][-1]["content"]
    assert [part["type"] for part in content].count("image_url") == 2
    assert content[0]["text"].splitlines()[1:] == [
        "(protege: an image from read_attachment (call call_2_2) was not shown: a run shows "
        "the model at most 2 files (max_parts_per_run in [runs]))"
    ]


def test_a_text_only_model_gets_the_pdfs_text_and_a_clear_failure_for_the_image(
    reader, protege_app, scripted_model
):
    scripted_model.script(say("Looking."))
    first = run_with(reader, protege_app)
    photo, receipt = attachments_of([first.message])[first.message.id]
    request = scripted_model.requests[0]
    email_text = request["messages"][-1]["content"]
    assert isinstance(email_text, str)  # no parts for a text-only model
    listed = f"- receipt.pdf (application/pdf, {len(PDF)} bytes, blob id {receipt.token})"
    assert listed in email_text

    scripted_model.script(
        tool_calls(
            [
                tool_call("read_attachment", blob_id=receipt.token),
                tool_call("read_attachment", blob_id=photo.token),
            ]
        ),
        say("Refund due."),
    )
    run_reply(
        reader,
        sender="jane@acme.com",
        body="Well?",
        reply_to=first.message,
        installation=protege_app,
    )
    messages = scripted_model.requests[2]["messages"]
    pdf_result, image_result = messages[-2:]  # tool messages last: nothing follows them
    assert (pdf_result["role"], image_result["role"]) == ("tool", "tool")
    assert unfenced(pdf_result["content"]) == {
        "ok": True,
        "blob_id": receipt.token,
        "filename": "receipt.pdf",
        "size": len(PDF),
        "content_type": "application/pdf",
        "pages": 1,
        "pages_read": 1,
        "text": "The Scoop - receipt\nOrder SCP-1042: Mango Sorbet, 24.50 USD\n"
        "Delivered 14:05, frozen",
        "truncated": False,
    }
    assert unfenced(image_result["content"]) == {
        "ok": False,
        "reason": "this file is an image and the model cannot see images (its [model] input "
        "is text)",
        "blob_id": photo.token,
        "filename": "photo.png",
        "size": len(PNG),
        "content_type": "image/png",
    }
    assert "image_url" not in json.dumps(scripted_model.requests)
    assert '"file"' not in json.dumps(scripted_model.requests)
