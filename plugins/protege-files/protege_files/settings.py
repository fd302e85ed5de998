"""``[plugins.protege-files]`` in ``protege.toml``: the limits of ``read_attachment`` and
``create_file``, declared through the ``plugin_settings`` hook so that protege checks the
table as it checks its own (an unknown key, a value of the wrong TOML type, or one a limit
refuses is named, and the file tools are not registered).

    [plugins.protege-files]
    max_read_bytes = 10485760       # read_attachment reads files up to this size
    max_text_chars = 20000          # and gives back this much of their text
    max_pdf_pages = 100             # of a PDF whose text is extracted
    max_pdf_seconds = 10.0          # of CPU for that extraction
    max_created_bytes = 1048576     # create_file writes files up to this size
    max_filename_chars = 100        # and names them in this many characters

How many files a run shows the model as themselves is protege's own limit, under ``[runs]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from protege import RunContext

DISTRIBUTION = "protege-files"
MIB = 1024 * 1024


@attrs.frozen(kw_only=True)
class FilesSettings:
    """The limits of the file tools.

    ``read_attachment`` reads files of at most ``max_read_bytes`` and gives back at most
    ``max_text_chars`` characters of text (``max_pdf_pages`` pages of a PDF whose text is
    extracted, in a process of its own given ``max_pdf_seconds`` of CPU). ``create_file``
    writes at most ``max_created_bytes`` and names files in at most ``max_filename_chars``
    characters.
    """

    max_read_bytes: int = attrs.field(default=10 * MIB, validator=attrs.validators.ge(1))
    max_text_chars: int = attrs.field(default=20_000, validator=attrs.validators.ge(100))
    max_pdf_pages: int = attrs.field(default=100, validator=attrs.validators.ge(1))
    max_pdf_seconds: float = attrs.field(
        default=10.0, validator=[attrs.validators.gt(0), attrs.validators.le(120)]
    )
    max_created_bytes: int = attrs.field(default=MIB, validator=attrs.validators.ge(1))
    max_filename_chars: int = attrs.field(
        default=100, validator=[attrs.validators.ge(8), attrs.validators.le(200)]
    )


def settings_of(context: RunContext) -> FilesSettings:
    """The file tools' settings of the run's installation, as protege checked them: the
    defaults when ``protege.toml`` has no ``[plugins.protege-files]`` (or the configuration
    was never checked against the declaration, as in a context made by hand)."""
    found = context.config.plugin_settings(DISTRIBUTION)
    return found if isinstance(found, FilesSettings) else FilesSettings()
