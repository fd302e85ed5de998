"""The exceptions protege raises on purpose; each carries a message meant for a person."""


class ProtegeError(Exception):
    """Base of every error protege reports to its user (the CLI prints its message, one line)."""


class ConfigError(ProtegeError):
    """``protege.toml`` or the environment holds something protege cannot use."""


class InvalidTool(ProtegeError):
    """A tool class breaks the tool contract; the message says how."""
