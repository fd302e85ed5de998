"""What the mail ingresses read from a request, read so that no body can hold the dashboard up.

Everything that can be judged before the body is (the content type, its encoding, the
declared length against the cap); the body is then read as it arrives, never past its cap,
and parsed a piece at a time in a worker thread, never on the event loop that answers every
other page. A form counts every field it carries (a name sent twice counts twice), and is
refused as soon as it has too many, without reading on. A URL-encoded value is decoded only
when read, so a form can be checked before its big values cost anything.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
from python_multipart import create_form_parser
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from protege import IngressRefused

# The forms the providers post have about twenty fields (SendGrid's parsed mode, Mailgun's
# parsed fields), plus one per attachment.
MAX_FIELDS = 100
# Bytes handed to the parser at a time: small enough that no piece keeps a worker long,
# large enough that a big message is not a thousand hops to a thread.
PARSE_PIECE = 256 * 1024
MAX_NAME_BYTES = 100  # the providers' longest is under 40


# An answer other than 204, with the status and the line to say: protege's own exception,
# so that a plugin's ingress refuses as the dashboard's do.
Refused = IngressRefused


def media_type(request: Request) -> str:
    """The request's media type, lowercased, without its parameters."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def check_type(request: Request, *allowed: str) -> None:
    """415 unless the body is sent as it is (no content coding) as one of ``allowed``."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding != "identity":
        raise Refused(415, f"send the body as it is, not {encoding}-encoded")
    media = media_type(request)
    if media not in allowed:
        raise Refused(415, f"send {' or '.join(allowed)}, not {media or 'no content type'}")


def check_length(request: Request, limit: int) -> None:
    """413 when the request says its body is longer than ``limit``, before any of it is read."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise Refused(413, f"the body is over the limit of {limit} bytes")


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refused (413) as soon as it passes ``limit`` bytes."""
    check_length(request, limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Refused(413, f"the body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(request: Request, limit: int) -> Any:
    """The body read as JSON, in a worker thread; 422 for a body that is not JSON, or is
    nested deeper than the parser goes."""
    body = await read_body(request, limit)
    return await run_in_threadpool(_json, body)


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise Refused(422, "the body is not JSON") from None
    except RecursionError:
        raise Refused(422, "the body is JSON nested too deeply") from None


@attrs.frozen
class Upload:
    """A file part of a posted form, as sent."""

    field: str
    filename: str
    content_type: str | None
    data: bytes


class _PercentDecoded(Mapping[str, bytes]):
    """URL-encoded values, each decoded the first time it is asked for: decoding is slow
    in Python, so a form is checked (Mailgun's signature) before its big values are read."""

    def __init__(self, encoded: dict[str, bytes]) -> None:
        self._encoded = encoded
        self._decoded: dict[str, bytes] = {}

    def __getitem__(self, name: str) -> bytes:
        if name not in self._decoded:
            self._decoded[name] = _unquoted(self._encoded[name])
        return self._decoded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._encoded)

    def __len__(self) -> int:
        return len(self._encoded)

    def size(self, name: str) -> int:
        """How many bytes ``name``'s value was sent as (at least its decoded length)."""
        return len(self._encoded.get(name, b""))


@attrs.frozen
class Form:
    """A posted form: each field's first value as the bytes sent (a message in a field keeps
    every byte, whatever its character set), and its file parts in order. A URL-encoded
    value is decoded when first read: read a big one in a worker thread."""

    fields: Mapping[str, bytes]
    files: tuple[Upload, ...] = ()

    def get(self, name: str) -> bytes | None:
        """The field ``name``'s bytes (None when the form has no such field)."""
        return self.fields.get(name)

    def text(self, name: str) -> str | None:
        """The field ``name`` as text (UTF-8, undecodable bytes replaced); None when empty."""
        value = self.fields.get(name)
        return value.decode("utf-8", "replace") if value else None

    def size(self, name: str) -> int:
        """How many bytes the field ``name`` was sent as, without decoding it (0 when the
        form has no such field)."""
        if isinstance(self.fields, _PercentDecoded):
            return self.fields.size(name)
        return len(self.fields.get(name) or b"")


async def read_form(request: Request, limit: int, *, files: bool = False) -> Form:
    """The posted form (``multipart/form-data`` or ``application/x-www-form-urlencoded``),
    read as it arrives: 413 past ``limit`` bytes or past ``MAX_FIELDS`` fields, 422 for a
    body that does not parse or (unless ``files``) carries a file part."""
    check_length(request, limit)
    content_type = request.headers.get("content-type", "")
    reading: _MultipartReading | _UrlencodedReading
    if media_type(request) == "multipart/form-data":
        reading = _MultipartReading(content_type, limit, files)
    else:
        reading = _UrlencodedReading()
    pending: list[bytes] = []
    size = waiting = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Refused(413, f"the body is over the limit of {limit} bytes")
        pending.append(chunk)
        waiting += len(chunk)
        if waiting >= PARSE_PIECE:
            await run_in_threadpool(reading.write, b"".join(pending))
            pending, waiting = [], 0
    return await run_in_threadpool(reading.finish, b"".join(pending))


def _too_many_fields() -> Refused:
    return Refused(413, f"the form has more than {MAX_FIELDS} fields")


class _UrlencodedReading:
    """One URL-encoded form being read, a piece at a time: every field is counted as its
    separator arrives (an empty one too), and the form is split once whole; its values
    stay encoded until read."""

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.separators = 0

    def write(self, piece: bytes) -> None:
        """Take the next piece of the body."""
        self.separators += piece.count(b"&")
        if self.separators >= MAX_FIELDS:
            raise _too_many_fields()
        self.pieces.append(piece)

    def finish(self, piece: bytes) -> Form:
        """Take the body's last piece; the form."""
        self.write(piece)
        encoded: dict[str, bytes] = {}
        for pair in b"".join(self.pieces).split(b"&"):
            if not pair:
                continue
            name, _, value = pair.partition(b"=")
            if len(name) > MAX_NAME_BYTES:
                raise Refused(422, f"a field name is over {MAX_NAME_BYTES} bytes")
            encoded.setdefault(_unquoted(name).decode("utf-8", "replace"), value)
        return Form(_PercentDecoded(encoded))


class _MultipartReading:
    """One multipart form being parsed by python-multipart, a piece at a time."""

    def __init__(self, content_type: str, limit: int, files: bool) -> None:
        self.files_allowed = files
        self.count = 0
        self.fields: dict[str, bytes] = {}
        self.files: list[Upload] = []
        headers = {"Content-Type": content_type.encode("latin-1", "replace")}
        try:
            self.parser = create_form_parser(
                headers,
                self._on_field,
                self._on_file,
                # Files stay in memory (the body's cap bounds them), never in a temporary file.
                config={"MAX_MEMORY_FILE_SIZE": limit + 1},
            )
        except Exception as error:  # python-multipart's word for a header it cannot use
            raise Refused(422, f"the form does not parse: {error}") from None

    def _counted(self) -> None:
        self.count += 1
        if self.count > MAX_FIELDS:
            raise _too_many_fields()

    def _on_field(self, field: Any) -> None:
        self._counted()
        name = (field.field_name or b"").decode("utf-8", "replace")
        self.fields.setdefault(name, field.value or b"")

    def _on_file(self, file: Any) -> None:
        self._counted()
        if not self.files_allowed:
            raise Refused(422, "the form may not carry files")
        file.file_object.seek(0)
        self.files.append(
            Upload(
                (file.field_name or b"").decode("utf-8", "replace"),
                (file.file_name or b"").decode("utf-8", "replace"),
                getattr(file, "content_type", None),
                file.file_object.read(),
            )
        )

    def write(self, piece: bytes) -> None:
        """Parse the next piece of the body."""
        try:
            self.parser.write(piece)
        except Refused:
            raise
        except Exception as error:  # python-multipart's word for a body it cannot read
            raise Refused(422, f"the form does not parse: {error}") from None

    def finish(self, piece: bytes) -> Form:
        """Parse the body's last piece and the end of the form; the form."""
        self.write(piece)
        try:
            self.parser.finalize()
        except Refused:
            raise
        except Exception as error:
            raise Refused(422, f"the form does not parse: {error}") from None
        return Form(self.fields, tuple(self.files))


def _unquoted(encoded: bytes) -> bytes:
    """A URL-encoded name or value as the bytes it stands for ("+" is a space)."""
    return urllib.parse.unquote_to_bytes(encoded.replace(b"+", b" "))
