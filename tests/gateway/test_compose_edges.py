"""Edges of the plain writer and of the process-wide header cache: hostile or odd values
come out as the email package writes them, and the cache stays small."""

import gc
import threading
import tracemalloc

from protege.gateway.compose import package_bytes, plain_bytes, render
from protege.gateway.parse import SharedHeaders
from tests.gateway.test_compose_fast import plain


def mail(**changes):
    """A plain first mail of its thread (no ids it answers), with ``changes``."""
    first = {"in_reply_to": None, "references": (), "message_id": "<0123@thescoop.example>"}
    return plain(**{**first, **changes})


def test_long_headers_are_not_shared_so_memory_stays_bounded():
    """Replies are "Re: " + the inbound subject (up to 2000 characters, the sender's
    choice). Each distinct subject under 998 characters is kept, parse tree and all:
    ~0.5 MB each, so 1024 of them hold ~0.5 GB per worker process."""
    SharedHeaders._shared.clear()
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(200):
            subject = ("Re: " + f"{i:05d} " + "a " * 495)[:990].strip()
            render(mail(subject=subject, message_id=f"<{i}x@thescoop.example>"))
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
        SharedHeaders._shared.clear()
    # 200 mails; with 1024 the same growth is ~5x
    assert grown < 20e6, f"200 long-subject mails left {grown / 1e6:.0f} MB in the header cache"


def test_one_off_headers_are_not_shared():
    """Subject, Date, Message-ID are unique per mail: they evict the shared From/To/MIME
    headers the cache is for."""
    SharedHeaders._shared.clear()
    for i in range(400):
        render(mail(subject=f"Order {i}", message_id=f"<{i}y@thescoop.example>"))
    names = [name for name, _ in SharedHeaders._shared]
    one_off = sum(1 for n in names if n.lower() in ("subject", "message-id", "date"))
    SharedHeaders._shared.clear()
    assert one_off < len(names) / 2, f"{one_off} of {len(names)} kept headers are one-off values"


def test_shared_headers_fold_the_same_every_time_and_across_threads():
    """A header object shared between messages (and threads) must not be changed by
    folding it."""
    hostile = mail(
        sender_name="Zoë Ünïcode Ŝender with a long name that must be encoded and folded",
        subject="Ünïcode " * 30,
        to=tuple(f"person{i}@thescoop.example" for i in range(12)),
    )
    first = render(hostile)
    results, errors = [], []

    def again():
        try:
            for _ in range(50):
                results.append(render(hostile))
        except Exception as error:
            errors.append(error)

    threads = [threading.Thread(target=again) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    # Date/Message-ID are fixed above, so every rendering must be identical.
    assert all(r == first for r in results)


def test_fast_writer_edge_bodies_match_the_package():
    for body in [
        "",
        "\n",
        "\n\n\n",
        ".\n",
        "From the shop\n",
        "trailing   \n\t tab\n",
        "x" * 78,
        "a\r\nb\rc\n",
        "--boundary\nContent-Type: text/html\n\n<b>hi</b>\n",
    ]:
        outgoing = mail(body=body)
        direct = plain_bytes(outgoing)
        if direct is not None:
            assert direct == package_bytes(outgoing), repr(body)
        render(outgoing)


def test_fast_writer_edge_headers_match_the_package():
    cases = [
        {"subject": ""},
        {"subject": "a:b"},
        {"subject": 'quote " in subject'},
        {"subject": "(comment) <x@y.z>"},
        {"sender_name": "a"},
        {"sender_name": "'"},
        {"sender_name": "x" * 40},
        {"sender": "a!b%c@d"},
        {"to": ("-@-",)},
        {"to": ("a@b", "c@d")},
        {"in_reply_to": "<a@b>"},
        {"references": ("<a@b>", "<c@d>")},
        {"loop": -5},
        {"message_id": "<" + "i" * 60 + "@x>"},
    ]
    for change in cases:
        outgoing = mail(**change)
        direct = plain_bytes(outgoing)
        if direct is not None:
            assert direct == package_bytes(outgoing), change
            render(outgoing)
