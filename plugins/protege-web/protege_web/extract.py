"""HTML to readable text: the title, and the main text with its headings, lists and links,
without scripts, styles, navigation or anything hidden."""

from __future__ import annotations

import re
from urllib.parse import urljoin

from bs4 import BeautifulSoup, NavigableString, Tag
from bs4.element import Comment, Declaration, Doctype, ProcessingInstruction

# Never text a reader would read: dropped with everything inside.
DROPPED = (
    "script", "style", "noscript", "template", "head", "svg", "canvas", "iframe", "object",
    "embed", "nav", "aside", "form", "button", "select", "input", "textarea", "dialog", "map",
)  # fmt: skip
DROPPED_ROLES = ("navigation", "banner", "contentinfo", "search", "complementary", "dialog")
# Links that are page furniture: the pilcrow after a heading, "skip to content".
DROPPED_CLASSES = {"headerlink", "skip-link"}
BLOCKS = {
    "p", "div", "section", "article", "main", "header", "footer", "blockquote", "figure",
    "figcaption", "table", "address", "dl", "details", "summary", "center", "body", "html",
}  # fmt: skip
HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
MAX_LINK_LENGTH = 2000
MAX_INDENT = 8  # levels of list nesting shown as indentation

_SPACES = re.compile(r"\s+")
_VOID_TAG = re.compile(
    rb"<(area|base|br|col|embed|hr|img|input|link|meta|param|source|track|wbr)"
    rb"(\s[^<>]*?)?/?>",
    re.IGNORECASE,
)
_BLANK_LINES = re.compile(r"\n{3,}")
_SKIPPED_STRINGS = (Comment, Declaration, Doctype, ProcessingInstruction)


def html_to_text(
    html: bytes, *, base_url: str, charset: str | None = None, max_chars: int = 200_000
) -> tuple[str, str]:
    """The page's title and its readable text (Markdown-like: ``#`` headings, ``-`` and
    ``1.`` list items, ``[text](url)`` links with URLs made absolute against ``base_url``)."""
    # Void elements written without "/>" (<br>) are remembered by BeautifulSoup's html.parser
    # builder in a list searched at every end tag: quadratic in their number. Closed at once,
    # they are never remembered.
    html = _VOID_TAG.sub(rb"<\1\2/>", html)
    soup = BeautifulSoup(html, "html.parser", from_encoding=charset)
    title_tag = soup.find("title")
    title = _SPACES.sub(" ", title_tag.get_text()).strip() if title_tag else ""
    _drop_unread(soup)
    return title, _Writer(base_url, max_chars).render(_main(soup))


def _drop_unread(soup: BeautifulSoup) -> None:
    doomed = [*soup.find_all(DROPPED), *soup.find_all(_unread)]
    # A page's own header and footer are site chrome; an article's are part of it.
    doomed += [
        tag
        for tag in soup.find_all(["header", "footer"])
        if tag.find_parent(["article", "main"]) is None
    ]
    for tag in doomed:
        if not tag.decomposed:
            tag.decompose()


def _unread(tag: Tag) -> bool:
    """Whether ``tag`` is hidden, or has a role of site chrome (navigation, banners)."""
    style = str(tag.get("style", "")).replace(" ", "").lower()
    return (
        tag.get("role") in DROPPED_ROLES
        or not DROPPED_CLASSES.isdisjoint(tag.get_attribute_list("class"))
        or tag.has_attr("hidden")
        or str(tag.get("aria-hidden", "")).lower() == "true"
        or "display:none" in style
        or "visibility:hidden" in style
    )


def _main(soup: BeautifulSoup) -> Tag:
    """The part of the page that is its content: ``main``, else its one ``article``, else
    the body."""
    main = soup.find("main") or soup.find(lambda tag: tag.get("role") == "main")
    if isinstance(main, Tag):
        return main
    articles = soup.find_all("article")
    if len(articles) == 1 and isinstance(articles[0], Tag):
        return articles[0]
    body = soup.find("body")
    return body if isinstance(body, Tag) else soup


def _start(tag: Tag) -> int:
    start = str(tag.get("start", "1")).strip()
    return int(start) if start.isdigit() and len(start) < 7 else 1


class _Writer:
    """Walks a tree without recursion (a hostile page may nest ten thousand levels deep)."""

    def __init__(self, base_url: str, max_chars: int) -> None:
        self.base_url = base_url
        # Some shapes (ten thousand nested lists) would write far more than the page holds:
        # writing stops a little past what the caller keeps.
        self.budget = 2 * max_chars + 1000
        self.pieces: list[str] = []
        self.lists: list[list[int]] = []  # one [counter] per open list; -1 when unordered
        self.rows: list[list[int]] = []  # one [cells so far] per open table row
        self.item_open = False  # a list item's marker is written, its text not yet
        self.links: list[tuple[int, str | None]] = []
        self.preformatted = 0

    def render(self, root: Tag) -> str:
        """The text of ``root``."""
        stack: list[tuple[Tag | NavigableString, bool]] = [(root, False)]
        while stack and self.budget > 0:
            node, leaving = stack.pop()
            if isinstance(node, NavigableString):
                if not isinstance(node, _SKIPPED_STRINGS):
                    self.text(str(node))
            elif leaving:
                self.close(node)
            else:
                self.open(node)
                stack.append((node, True))
                stack.extend(
                    (child, False)
                    for child in reversed(node.contents)
                    if isinstance(child, Tag | NavigableString)
                )
        lines = (line.rstrip() for line in "".join(self.pieces).split("\n"))
        return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()

    def open(self, tag: Tag) -> None:
        """Output for the start of ``tag``."""
        name = tag.name
        if name in HEADINGS:
            self.block()
            self._put("#" * HEADINGS[name] + " ")
        elif name in BLOCKS or name in ("pre", "ul", "ol", "tr", "hr"):
            nested_list = name in ("ul", "ol") and self.lists
            self.newline() if name == "tr" or nested_list else self.block()
            if name == "pre":
                self.preformatted += 1
            elif name == "tr":
                self.rows.append([0])
            elif name in ("ul", "ol"):
                self.lists.append([_start(tag) - 1 if name == "ol" else -1])
            elif name == "hr":
                self._put("---")
        elif name == "li":
            self.newline()
            counter = self.lists[-1] if self.lists else [-1]
            indent = "  " * min(max(len(self.lists) - 1, 0), MAX_INDENT)
            if counter[0] >= 0:
                counter[0] += 1
                self._put(f"{indent}{counter[0]}. ")
            else:
                self._put(f"{indent}- ")
            self.item_open = True
        elif name in ("td", "th"):
            # Counted, not looked up: html.parser nests cells whose end tags are left out.
            if self.rows and self.rows[-1][0] > 0:
                self._put(" | ")
            if self.rows:
                self.rows[-1][0] += 1
        elif name in ("br", "dt", "dd"):
            self.newline()
        elif name == "a":
            self.links.append((len(self.pieces), self._link(tag)))
            self._put("[")

    def close(self, tag: Tag) -> None:
        """Output for the end of ``tag``."""
        name = tag.name
        if name in HEADINGS or name in BLOCKS or name in ("ul", "ol", "pre", "hr"):
            if name == "pre":
                self.preformatted -= 1
            elif name in ("ul", "ol") and self.lists:
                self.lists.pop()
                if self.lists:  # a nested list ends its item's line, not the paragraph
                    self.newline()
                    return
            self.block()
        elif name in ("li", "tr", "dt", "dd"):
            if name == "tr" and self.rows:
                self.rows.pop()
            self.newline()
        elif name == "a" and self.links:
            start, url = self.links.pop()
            inner = "".join(self.pieces[start + 1 :]).strip()
            if url is None or not inner:
                del self.pieces[start]  # its "[": nothing is left behind for _tail to walk
            else:
                self._put(f"]({url})")

    def text(self, value: str) -> None:
        """Output for a run of text: whitespace collapsed, except inside ``pre``."""
        if self.preformatted:
            self._put(value)
            return
        collapsed = _SPACES.sub(" ", value)
        if collapsed.startswith(" ") and self._tail().endswith((" ", "\n", "[")):
            collapsed = collapsed[1:]
        if collapsed.strip():
            self.item_open = False
        if collapsed:
            self._put(collapsed)

    def newline(self) -> None:
        """End the current line, if it has anything on it."""
        tail = self._tail()
        if tail and not tail.endswith("\n"):
            self._put("\n")

    def block(self) -> None:
        """Leave a blank line before what follows, unless there is one already (or a list
        item has just begun: its paragraph stays on the marker's line)."""
        if self.item_open:
            return
        tail = self._tail()
        if tail and not tail.endswith("\n\n"):
            self._put("\n" if tail.endswith("\n") else "\n\n")

    def _put(self, piece: str) -> None:
        self.pieces.append(piece)
        self.budget -= len(piece)

    def _tail(self) -> str:
        """The last two characters written."""
        tail = ""
        for piece in reversed(self.pieces):
            tail = piece + tail
            if len(tail) >= 2:
                break
        return tail[-2:]

    def _link(self, tag: Tag) -> str | None:
        href = tag.get("href")
        if not isinstance(href, str) or not href.strip():
            return None
        url = urljoin(self.base_url, href.strip())
        if not url.startswith(("http://", "https://")) or len(url) > MAX_LINK_LENGTH:
            return None
        return url.replace(" ", "%20").replace(")", "%29")
