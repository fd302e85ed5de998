"""What a plugin's dashboard page is handed: the contract of the ``dashboard_pages`` hook.

A page is a function ``page(request, view)`` (plain or ``async``) that a plugin registers with
a path, a title and, if it wants one, a menu label. The dashboard serves it behind its login
and, for a POST, only once the form's CSRF token is found to be the session's; ``view`` carries
what the page needs to answer: the installation, who is signed in, the token to put in its own
forms, and the checked form. The page returns HTML text, which the dashboard shows inside its
own layout (title, menu, sign-out), or a response of the web framework ``request`` belongs to.
This module imports no web framework.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from protege.installation import Installation


@attrs.frozen
class DashboardView:
    """One request to a plugin's page, as the dashboard hands it over with the request."""

    #: The installation the dashboard serves (configuration, database, plugins).
    app: Installation
    #: The name of the signed-in operator.
    operator: str
    #: The session's CSRF token: every form the page shows must send it as ``csrf_token``.
    csrf_token: str
    #: The posted form, its CSRF token already checked (None for a GET).
    form: Mapping[str, Any] | None = None

    @property
    def csrf_field(self) -> str:
        """The hidden input carrying the CSRF token, to put inside each ``<form>``."""
        return f'<input type="hidden" name="csrf_token" value="{html.escape(self.csrf_token)}">'
