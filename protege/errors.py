"""The exceptions protege raises on purpose; each carries a message meant for a person."""

from collections.abc import Iterable

# Set on log records of problems the commands report themselves (``protege doctor``,
# ``protege plugins``): the command line does not print those records a second time.
REPORTED = "protege_reported"


class ProtegeError(Exception):
    """Base of every error protege reports to its user (the CLI prints its message, one line)."""


class ConfigError(ProtegeError):
    """``protege.toml`` or the environment holds something protege cannot use."""


class InvalidTool(ProtegeError):
    """A tool class breaks the tool contract; the message says how."""


class BlobStoreError(ProtegeError, OSError):
    """The blob store could not keep or give back a file (unreachable, refused, corrupt).

    An ``OSError``, so code that reads files and handles ``OSError`` handles this too.
    """


class BlobMissingError(BlobStoreError, FileNotFoundError):
    """A blob's bytes are not in the store, whichever store it is."""


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """`` (did you mean X?)`` when one of ``candidates`` is close to ``name``, else ``""``:
    the tail of a message about a name nothing answers to."""
    import difflib  # only when a name is not found

    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""
