"""The exceptions protege raises on purpose; each carries a message meant for a person."""


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
