"""Readable text from saved pages shaped like the web's: a news article, a documentation
page, a legacy table layout in Latin-1, and a hostile page."""

from pathlib import Path

import pytest

from protege_web.extract import html_to_text

PAGES = Path(__file__).parent / "fixtures" / "pages"
BASE = "https://site.example/news/2026/heat.html"


def read(name, charset=None):
    return html_to_text((PAGES / name).read_bytes(), base_url=BASE, charset=charset)


def test_a_news_article_keeps_its_headings_lists_and_links_and_drops_the_site_chrome():
    title, text = read("news_article.html")
    assert title == "Heatwave melts ice-cream supply chains | The Daily Ladle"
    assert text.startswith("Business\n\n# Heatwave melts ice-cream supply chains\n\n")
    assert "\n## What producers are doing\n" in text
    assert (
        "- Delivering before dawn, when the roads are coolest.\n"
        "- Switching to dry-ice packaging for short routes.\n"
        "- Pausing deliveries of sorbets, which melt first."
    ) in text
    assert "[record temperatures](https://weather.example.org/reports/2026-heat)" in text
    assert "[Our guide to storing sorbet](https://site.example/news/food/sorbet-guide)" in text
    assert "By [Ana Pereira](https://site.example/authors/ana-pereira)" in text
    for chrome in ("Skip to content", "cookies", "Sections", "Most read", "Privacy",
                   "Advertisement", "gtag", "schema.org", "Search", "Accept all"):  # fmt: skip
        assert chrome not in text, chrome


def test_a_documentation_page_keeps_tables_numbered_steps_and_code():
    title, text = read("docs_page.html")
    assert title == "Configuring the freezer controller \u2014 Chillbox 2.4 documentation"
    assert text.startswith("# Configuring the freezer controller\n\n")
    assert "Key | Default | Meaning\ntarget | -18 | Temperature to hold, in \u00b0C\n" in text
    assert "1. Stop the controller." in text
    assert "2. Edit the file:" in text
    assert "3. Start it again." in text
    assert "[freezer]\ntarget = -20\nalarm  = -14\n" in text  # pre keeps its spacing
    assert "[First run](https://site.example/news/2026/install.html#first-run)" in text
    for chrome in ("Navigation", "Table of Contents", "\u00b6", "General Index", "Sphinx"):
        assert chrome not in text, chrome


@pytest.mark.parametrize("charset", [None, "iso-8859-1"])
def test_a_legacy_latin1_page_is_decoded_and_its_unclosed_cells_kept_apart(charset):
    title, text = read("legacy_latin1.html", charset)
    assert title == "Caf\u00e9 Gel\u00e9 - Prices"
    assert "Flavour | Price\nVanilla | 3,50 EUR\nPistachio | 4,20 EUR" in text
    assert "All prices include tax.\nOrders over 20 litres: call us first." in text
    # A mail link is not a web link: its text stays, the address is not made a link.
    assert "Write to orders@cafe-gelee.example" in text
    assert "mailto:" not in text


def test_a_hostile_page_loses_what_is_hidden_or_executable_and_its_depth_breaks_nothing():
    title, text = read("hostile.html")
    assert title == "Totally normal recipe"
    assert text == (
        "# Lemon sorbet\n\nJuice six lemons.\n\nFreeze for four hours, stirring twice.\n\n"
        "Deep inside the page."
    )


def test_an_empty_or_broken_document_gives_empty_text():
    assert html_to_text(b"", base_url=BASE) == ("", "")
    assert html_to_text(b"<html><body><p>half <b>open", base_url=BASE) == ("", "half open")


def test_deeply_nested_lists_write_no_more_than_the_text_kept():
    page = b"<html><body>" + b"<ul>" * 20_000 + b"<li>x" * 20_000
    _, text = html_to_text(page, base_url="https://example.org/", max_chars=1000)
    assert len(text) <= 2 * 1000 + 1000 + 40  # the budget, and the piece that crossed it
    assert "- x" in text
    assert "\n" + "  " * 9 not in text  # indentation stops at eight levels


def test_void_elements_without_a_slash_read_as_before():
    _, text = html_to_text(
        b"<p>one<br>two<br/>three<img src=x.png alt=y>four<hr>five</p>",
        base_url="https://example.org/",
    )
    assert text == "one\ntwo\nthreefour\n\n---\n\nfive"


def test_empty_links_leave_nothing_behind():
    _, text = html_to_text(b"<p>" + b"<a></a><br>" * 500 + b"end</p>", base_url="https://e.org/")
    assert text == "end"
