"""Plugins' pages in the dashboard (``dashboard_pages``): collected, checked against the paths
the dashboard answers itself, and served behind its login and CSRF check, inside its layout."""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

import attrs
from markupsafe import Markup
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route, compile_path

from protege import DashboardView, admin
from protege_dashboard.owners import Owner, current_owner, normalized
from protege_dashboard.security import PUBLIC_PREFIXES, checked_form, csrf_token
from protege_dashboard.web import render

logger = logging.getLogger(__name__)

METHODS = frozenset({"GET", "POST"})
# A path is literal segments and {parameters}; nothing a browser or proxy reads differently.
PATH = re.compile(r"^(/([A-Za-z0-9._~-]+|\{[A-Za-z_][A-Za-z0-9_]*(:(str|int|path))?\}))+/?$")
PARAMETER = re.compile(r"\{[^}]*\}")
# A path that would sit beside the login page or the public prefixes would not be behind the
# login at all: the check in ``security.RequireLogin`` is by prefix.
PUBLIC_STEMS = tuple(prefix.rstrip("/") for prefix in PUBLIC_PREFIXES)
MAX_LABEL = 40


@attrs.frozen
class PluginPage:
    """One page a plugin registered."""

    path: str
    page: Callable[..., Any]
    title: str
    menu: str | None
    methods: tuple[str, ...]
    owner: Owner


@attrs.frozen
class MenuEntry:
    """A link in the dashboard's menu to a plugin's page; its label is shown escaped."""

    href: str
    label: str


def _sample(path: str) -> str:
    """A concrete path ``path`` (a route's format) matches: each parameter a 1."""
    return PARAMETER.sub("1", path)


def _matches(route: BaseRoute, path: str) -> bool:
    scope = {"type": "http", "path": path, "root_path": "", "method": "GET"}
    return route.matches(scope)[0] is not Match.NONE


def _route_path(route: BaseRoute) -> str:
    return str(getattr(route, "path", "") or "")


@attrs.define
class PageRegistry:
    """What ``dashboard_pages`` offered, checked: a page whose path the dashboard already
    answers, or another plugin registered first, is reported and left out."""

    app: admin.Installation
    builtin: Sequence[BaseRoute]
    pages: list[PluginPage] = attrs.Factory(list)
    refused: list[str] = attrs.Factory(list)
    # What the hook offered: its owner, the order it came in, and register's arguments.
    offered: list[tuple[Owner, int, tuple[Any, ...]]] = attrs.Factory(list)

    def register(
        self,
        path: str,
        page: Callable[..., Any],
        *,
        title: str,
        menu: str | None = None,
        methods: Sequence[str] = ("GET",),
    ) -> None:
        """``register`` as the hook hands it to implementations."""
        self.offered.append(
            (current_owner(), len(self.offered), (path, page, title, menu, methods))
        )

    def _take(
        self, owner: Owner, path: Any, page: Any, title: Any, menu: Any, methods: Any
    ) -> None:
        problem = self._problem(path, page, title, menu, methods)
        if problem is not None:
            self._refuse(f"the page {path!r} from {owner} is left out: {problem}")
            return
        upper = tuple(sorted({m.upper() for m in methods}))
        self.pages.append(PluginPage(path, page, title, menu, upper, owner))

    def _problem(
        self,
        path: object,
        page: object,
        title: object,
        menu: object,
        methods: Sequence[str],
    ) -> str | None:
        if not isinstance(path, str) or not PATH.match(path) or {".", ".."} & set(path.split("/")):
            return "its path is not a path of letters, digits, '._~-' and {parameters}"
        if path.startswith(PUBLIC_STEMS):
            return "the dashboard answers that path without a login"
        if not callable(page):
            return "its page is not a function"
        if not isinstance(title, str) or not title.strip():
            return "it has no title"
        if menu is not None and (not isinstance(menu, str) or not 0 < len(menu) <= MAX_LABEL):
            return f"its menu label is not text of 1 to {MAX_LABEL} characters"
        if menu is not None and PARAMETER.search(path):
            return "a page with {parameters} in its path cannot have a menu link"
        if isinstance(methods, str) or not set(map(str.upper, methods)) <= METHODS or not methods:
            return "it may answer GET and POST only"
        regex = compile_path(path)[0]
        for route in self.builtin:
            theirs = _route_path(route)
            if _matches(route, _sample(path)) or (theirs and regex.match(_sample(theirs))):
                return f"the dashboard answers {theirs or path} itself"
        for taken in self.pages:
            if compile_path(taken.path)[0].match(_sample(path)) or regex.match(_sample(taken.path)):
                return f"{taken.owner} registered {taken.path} first"
        return None

    def _refuse(self, reason: str) -> None:
        self.refused.append(reason)
        logger.warning("%s", reason)

    def collect(self) -> tuple[PluginPage, ...]:
        """Call the hook; the pages to serve, in the order of their owners."""
        try:
            self.app.plugins.hook.dashboard_pages(app=self.app, register=self.register)
        except Exception:
            logger.exception("dashboard_pages failed (a wrapper raised)")
        # A plugin whose implementation raised has none of its pages served, as a broken
        # plugin's ingresses are not.
        failed = {
            normalized(p.source.distribution)
            for p in self.app.plugins.plugins
            if "dashboard_pages" in p.failures
        }
        # A contested path goes to the first owner by distribution name, whatever order
        # pluggy called the plugins in (as tools, commands and ingresses are decided).
        for owner, _, arguments in sorted(self.offered, key=lambda o: (o[0], o[1])):
            if owner.distribution in failed:
                self._refuse(f"the page {arguments[0]!r} from {owner} is left out: its hook raised")
                continue
            self._take(owner, *arguments)
        return tuple(sorted(self.pages, key=lambda p: p.owner))


def routes(pages: Sequence[PluginPage]) -> list[Route]:
    """A route for each page, its endpoint the page behind the CSRF check."""
    return [Route(p.path, endpoint(p), methods=list(p.methods)) for p in pages]


def menu(pages: Sequence[PluginPage]) -> tuple[MenuEntry, ...]:
    """The menu links the pages asked for."""
    return tuple(MenuEntry(p.path, p.menu) for p in pages if p.menu)


def endpoint(page: PluginPage) -> Callable[[Request], Any]:
    """Serve ``page``: a POST only with the session's CSRF token; what the page returns
    shown inside the layout (text) or sent as it is (a response); a page that raises
    answered with an error page."""

    async def serve(request: Request) -> Response:
        form = await checked_form(request) if request.method == "POST" else None
        view = DashboardView(
            app=request.app.state.installation,
            operator=request.state.operator.name,
            csrf_token=csrf_token(request),
            form=form,
        )
        try:
            if inspect.iscoroutinefunction(page.page):
                answer = await page.page(request, view)
            else:
                answer = await run_in_threadpool(page.page, request, view)
        except HTTPException:
            raise  # the page's own 404 or 403, answered as the dashboard's are
        except Exception:
            logger.exception("the page %s from %s failed", request.url.path, page.owner)
            raise HTTPException(500, f"this page of {page.owner} failed; see the log") from None
        if isinstance(answer, Response):
            return answer
        if isinstance(answer, str):
            return render(request, "plugin_page.html", title=page.title, body=Markup(answer))
        logger.error("the page %s from %s returned %r", request.url.path, page.owner, answer)
        raise HTTPException(500, f"this page of {page.owner} gave no answer; see the log")

    return serve
