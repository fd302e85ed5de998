"""Instructions given on the command line: as text, or read from a file."""

from __future__ import annotations

from pathlib import Path

from protege.errors import ProtegeError

MAX_INSTRUCTIONS_BYTES = 256 * 1024


def read_instructions(text: str | None, path: str | None, *, required: bool) -> str | None:
    """The instructions given as ``--instructions TEXT`` or ``--instructions-file PATH``
    (UTF-8, at most 256 KiB); None when neither is given and they are not ``required``."""
    if text is not None and path is not None:
        raise ProtegeError("give --instructions or --instructions-file, not both")
    if path is not None:
        file = Path(path)
        try:
            if file.stat().st_size > MAX_INSTRUCTIONS_BYTES:
                raise ProtegeError(
                    f"{path} is over {MAX_INSTRUCTIONS_BYTES // 1024} KiB: instructions are a "
                    "prompt, not a document"
                )
            return file.read_bytes().decode("utf-8")
        except OSError as error:
            raise ProtegeError(f"cannot read {path}: {error.strerror or error}") from None
        except UnicodeDecodeError:
            raise ProtegeError(f"{path} is not UTF-8 text") from None
    if text is None and required:
        raise ProtegeError("give the instructions: --instructions TEXT or --instructions-file F")
    return text
