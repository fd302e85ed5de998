"""protege: AI colleagues that live in a Python application and are reached by email.

This module is the public API for tool and plugin authors; everything it does not export
(other than ``protege.models``, ``protege.blobs``, ``protege.mail`` and ``protege.testing``)
is internal.
"""

from importlib.metadata import PackageNotFoundError, version

from protege.context import RunContext
from protege.hookspecs import hookimpl
from protege.result import Result, Trust, failure, success
from protege.tool import Tool

try:
    __version__ = version("protege")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["Result", "RunContext", "Tool", "Trust", "failure", "hookimpl", "success"]
