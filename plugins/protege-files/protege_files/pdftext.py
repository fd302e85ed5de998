"""A PDF's text, extracted in a process of its own, so that a hostile PDF costs bounded time.

pypdf can be made to work for hours on a file of a few hundred bytes (a form drawn ten
thousand times per page), and a thread cannot be stopped. A child process can: it gets a
CPU-time and a memory limit, and is killed past them.
"""

from __future__ import annotations

import io
import json
import logging
import sys

MEMORY_LIMIT = 1024 * 1024 * 1024


class PDFTextFailed(Exception):
    """The text could not be extracted (a broken PDF, or one that took too long)."""


def pdf_text(
    data: bytes, *, max_pages: int, max_chars: int, seconds: float
) -> tuple[str, int, int]:
    """The text of a PDF's first pages (stopping at ``max_chars``), its page count, and the
    pages read; ``PDFTextFailed`` when it cannot be had within ``seconds`` of CPU."""
    import subprocess  # loaded when a PDF is read, not when the plugin is

    try:
        done = subprocess.run(
            [sys.executable, "-m", "protege_files.pdftext", str(max_pages), str(max_chars)],
            input=data,
            capture_output=True,
            timeout=seconds * 2 + 5,  # wall clock: CPU time is the limit that counts
            preexec_fn=lambda: _limit(seconds),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise PDFTextFailed(
            f"it took more than {seconds:g} s (max_pdf_seconds in [plugins.protege-files])"
        ) from None
    if done.returncode < 0:  # killed: past its CPU time or its memory
        raise PDFTextFailed(
            f"it took more than {seconds:g} s of CPU or too much memory "
            "(max_pdf_seconds in [plugins.protege-files])"
        )
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise PDFTextFailed(reason[-1] if reason else "the extractor failed")
    answer = json.loads(done.stdout)
    return answer["text"], answer["pages"], answer["read"]


def _limit(seconds: float) -> None:
    import resource  # POSIX only, and only in the child

    cpu = max(1, int(seconds + 0.999))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _extract(data: bytes, max_pages: int, max_chars: int) -> dict[str, object]:
    import pypdf  # in the child only

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    reader = pypdf.PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        reader.decrypt("")  # many PDFs are "encrypted" with an empty password
    pages = len(reader.pages)
    texts: list[str] = []
    read = 0
    size = 0
    for page in reader.pages[:max_pages]:
        text = (page.extract_text() or "").strip()
        texts.append(text)
        read += 1
        size += len(text) + 2
        if size > max_chars:
            break
    return {"text": "\n\n".join(texts), "pages": pages, "read": read}


def main() -> None:
    """Read a PDF on standard input; write its text as JSON on standard output."""
    max_pages, max_chars = int(sys.argv[1]), int(sys.argv[2])
    try:
        answer = _extract(sys.stdin.buffer.read(), max_pages, max_chars)
    except Exception as error:  # pypdf raises many kinds on a broken PDF
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    sys.stdout.write(json.dumps(answer))


if __name__ == "__main__":
    main()
