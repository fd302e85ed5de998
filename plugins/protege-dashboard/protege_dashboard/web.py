"""What every page shares: the templates (autoescaped), rendering, redirects, record lookup."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse

from protege import admin
from protege.mail import redact_tokens
from protege_dashboard.security import csrf_token

TEMPLATES = Path(__file__).parent / "templates"

# Autoescaping on for every template: whatever came from outside (mail, tool output, names)
# reaches the page as text, never as HTML.
environment = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
environment.filters["printable"] = lambda text: admin.printable("" if text is None else str(text))
# An approval request's Message-ID holds its secret token: pages show it masked.
environment.filters["redacted"] = lambda text: redact_tokens("" if text is None else str(text))


def inline_code(text: object) -> Markup:
    """A line protege wrote for people (a flash, an error), made printable and escaped, with
    each `backticked` span (a command, a name) shown as code."""
    parts = admin.printable("" if text is None else str(text)).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: nothing is code
        return escape("`".join(parts))
    return Markup("").join(
        Markup("<code>{}</code>").format(part) if odd else escape(part)
        for odd, part in ((i % 2 == 1, p) for i, p in enumerate(parts))
    )


environment.filters["inline_code"] = inline_code


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """The page ``template`` filled with ``context``, the CSRF token and who is signed in."""
    page = environment.get_template(template).render(
        request=request,
        csrf_token=csrf_token(request),
        operator=getattr(request.state, "operator", None),
        flash=request.session.pop("flash", None),
        flash_error=request.session.pop("flash_error", None),
        # Plugins' pages (``dashboard_pages``), in the menu of every page.
        menu=getattr(request.app.state, "menu", ()),
        **context,
    )
    return HTMLResponse(page, status_code=status_code)


def redirect(
    path: str, flash: str | None = None, request: Request | None = None, *, error: bool = False
) -> RedirectResponse:
    """Go on to ``path`` after a form (303: the browser then asks with GET), with a line to
    show there: as an error if ``error``, else as what was done."""
    if flash is not None and request is not None:
        request.session["flash_error" if error else "flash"] = flash
    return RedirectResponse(path, status_code=303)


def installation(request: Request) -> admin.Installation:
    """The installation the dashboard serves."""
    return request.app.state.installation


def actor(request: Request) -> str:
    """Who the audit log names for a change made on this request."""
    return f"operator:{request.state.operator.name}"


def found(model: Any, record_id: Any) -> Any:
    """The record ``model`` numbered ``record_id``; 404 if there is none."""
    try:
        number = int(record_id)
    except (TypeError, ValueError):
        raise HTTPException(404, "no such record") from None
    record = model.get_or_none(model.id == number)
    if record is None:
        raise HTTPException(404, "no such record")
    return record
