"""``create_file``: the agent writes a text file it can then attach to mail."""

from __future__ import annotations

import json
import re
import unicodedata

from protege import Result, RunContext, Tool
from protege_files.settings import settings_of

FORMATS = {  # format: (extension, content type)
    "csv": ("csv", "text/csv; charset=utf-8"),
    "txt": ("txt", "text/plain; charset=utf-8"),
    "md": ("md", "text/markdown; charset=utf-8"),
    "html": ("html", "text/html; charset=utf-8"),
    "json": ("json", "application/json"),
    "svg": ("svg", "image/svg+xml"),
}
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Elements that run code or pull in other documents; an SVG holding any of them is refused.
_ACTIVE_ELEMENTS = {"script", "foreignobject", "iframe", "embed", "object", "handler", "listener"}
_CSS_LOADERS = ("image-set(", "image(", "cross-fade(", "element(", "src(")
_EXTERNAL_URL = re.compile(r"url\(\s*(?!['\"]?\s*#)", re.IGNORECASE)


class InvalidContent(ValueError):
    """The content is not a valid file of its format; the message says what is wrong."""


class CreateFileTool(Tool):
    """Writes a text file (CSV, text, Markdown, HTML, JSON or SVG) for the agent to attach."""

    description = (
        "Creates a file from text you write, and returns its blob_id: attach it to an email "
        "with send_email's attachments. format is csv, txt, md, html, json or svg; the "
        "filename gets the format's extension. JSON must parse, CSV must be valid CSV, and "
        "SVG must be well-formed XML with no scripts, event handlers or references to "
        "anything outside the file."
    )
    summary = "Create a text file (csv, txt, md, html, json, svg) to attach to mail."
    input_schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["format", "filename", "content"],
        "properties": {
            "format": {"enum": sorted(FORMATS)},
            "filename": {"type": "string", "minLength": 1, "maxLength": 1000},
            "content": {"type": "string"},
        },
    }

    def use(self, context: RunContext, format: str, filename: str, content: str) -> Result:
        limits = settings_of(context)
        data = content.encode("utf-8", "replace")  # a lone surrogate from the model's JSON
        if len(data) > limits.max_created_bytes:
            return self.failure(
                f"the content is {len(data)} bytes; a created file holds at most "
                f"{limits.max_created_bytes} (max_created_bytes in [plugins.protege-files])"
            )
        try:
            check(format, content)
        except InvalidContent as error:
            return self.failure(f"this is not valid {format}: {error}")
        from protege.blobs import store  # the database layer, loaded on first use

        name = file_name(filename, format, limits.max_filename_chars)
        content_type = FORMATS[format][1]
        blob = store(
            data,
            filename=name,
            content_type=content_type,
            agent=context.agent,
            config=context.config,
        )
        return self.success(
            blob_id=blob.token, filename=blob.filename, size=blob.size, content_type=content_type
        )


def file_name(requested: str, format: str, max_chars: int) -> str:
    """A safe name for a created file: no folders or control characters, at most
    ``max_chars`` characters, ending in the format's extension."""
    from protege.blobs import sanitize_filename

    extension = FORMATS[format][0]
    name = _CONTROLS.sub("", unicodedata.normalize("NFKC", requested))
    name = sanitize_filename(name, default="file")
    stem = name[: -len(extension) - 1] if name.lower().endswith(f".{extension}") else name
    stem = stem[: max_chars - len(extension) - 1].rstrip(" ._") or "file"
    return f"{stem}.{extension}"


def check(format: str, content: str) -> None:
    """Raise ``InvalidContent`` unless ``content`` is a valid file of ``format``."""
    if "\x00" in content:
        raise InvalidContent("it holds a NUL character")
    if format == "json":
        try:
            json.loads(content)
        except (ValueError, RecursionError) as error:
            raise InvalidContent(str(error)) from None
    elif format == "csv":
        _check_csv(content)
    elif format == "svg":
        _check_svg(content)


def _check_csv(content: str) -> None:
    if not content.strip():
        raise InvalidContent("it is empty")
    # Loaded when a CSV is written, not when the plugin is (as `protege tools` does).
    import csv
    import io

    try:
        rows = list(csv.reader(io.StringIO(content, newline=""), strict=True))
    except csv.Error as error:
        raise InvalidContent(str(error)) from None
    widths = {len(row) for row in rows if row}
    if len(widths) > 1:
        raise InvalidContent(
            f"its rows have different numbers of fields ({', '.join(map(str, sorted(widths)))})"
        )


def _check_svg(content: str) -> None:
    lowered = content.lower()
    # No document type: entities are the way to both expansion bombs and outside files.
    if "<!doctype" in lowered or "<!entity" in lowered:
        raise InvalidContent("it declares a document type or entities, which are not allowed")
    if "<?xml-stylesheet" in lowered:
        raise InvalidContent("it refers to a stylesheet outside the file")
    import xml.etree.ElementTree as ElementTree  # as csv above: when an SVG is written

    try:
        root = ElementTree.fromstring(content)
    except ElementTree.ParseError as error:
        raise InvalidContent(f"it is not well-formed XML ({error})") from None
    if _local(root.tag) != "svg":
        raise InvalidContent(f"its root element is <{_local(root.tag)}>, not <svg>")
    for element in root.iter():
        tag = _local(element.tag)
        if tag.lower() in _ACTIVE_ELEMENTS:
            raise InvalidContent(f"it holds a <{tag}> element, which is not allowed")
        for attribute, value in element.attrib.items():
            name = _local(attribute)
            if name.lower().startswith("on"):
                raise InvalidContent(f"<{tag}> has an event handler ({name}), not allowed")
            if name.lower() in {"href", "src"} and not value.strip().startswith("#"):
                raise InvalidContent(
                    f"<{tag}> refers to something outside the file ({name}), not allowed"
                )
            if name.lower() == "attributename" and value.strip().lower().endswith("href"):
                raise InvalidContent(f"<{tag}> changes a reference (href), not allowed")
            if _EXTERNAL_URL.search(value) or (name.lower() == "style" and _css_problem(value)):
                raise InvalidContent(f"<{tag}> refers to something outside the file (url())")
        if tag == "style" and _css_problem(element.text or ""):
            raise InvalidContent("its style sheet refers to something outside the file")


def _css_problem(css: str) -> bool:
    # CSS escapes (\75rl, \69mport) spell url( and @import past any pattern, and image-set()
    # and friends load images without url(): none of them is needed in a drawing.
    lowered = css.lower()
    return (
        "\\" in css
        or "@import" in lowered
        or bool(_EXTERNAL_URL.search(css))
        or any(name in lowered for name in _CSS_LOADERS)
    )


def _local(tag: object) -> str:
    """An element or attribute name without its namespace."""
    text = str(tag)
    return text.rsplit("}", 1)[-1] if text.startswith("{") else text
