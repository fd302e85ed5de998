"""What every mail ingress does with the message it took: the sender verdict (a trusted
provider's own results, or none), then the same ``ingest`` as the SMTP gateway, its outcome
answered in HTTP (204, 413, 422, 503)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from protege import admin
from protege.admin import DnsLookup, Verdict, unverified
from protege_dashboard.provider_verdicts import ProviderReport, from_domain, provider_verdict

logger = logging.getLogger(__name__)


def resolver_of(request: Request) -> DnsLookup:
    """The DNS resolver of this app's ingresses: one, kept on the app so that its cache
    serves every request, built again only when ``[mail.authentication]`` changed."""
    settings = request.app.state.installation.config.mail.authentication
    kept = getattr(request.app.state, "ingress_resolver", None)
    if kept is None or kept[0] != settings:
        kept = (settings, settings.resolver())
        request.app.state.ingress_resolver = kept
    return kept[1]


async def ingest_answered(
    request: Request,
    raw: bytes,
    recipients: list[str],
    envelope_sender: str | None = None,
    verdict: Verdict | None = None,
) -> Response:
    config = request.app.state.installation.config
    try:
        delivered = await run_in_threadpool(
            admin.ingest,
            raw,
            config=config,
            recipients=recipients,
            envelope_sender=envelope_sender,
            resolver=resolver_of(request),
            verdict=verdict,
            app=request.app.state.installation,
        )
    except admin.MailRejected as rejection:
        status = 413 if rejection.code == 552 else 422
        return PlainTextResponse(f"{rejection}\n", status_code=status)
    except admin.StorageUnavailable as error:
        logger.error("could not store inbound mail for now: %s", error)
        return PlainTextResponse(
            "the message could not be stored; try again later\n",
            status_code=503,
            headers={"Retry-After": "60"},
        )
    if admin.all_refused(delivered):
        for refused in delivered:
            logger.info("refused mail %s: %s", refused.message.id, refused.reason)
        return PlainTextResponse("this address does not accept your message\n", status_code=422)
    return Response(status_code=204)


async def verdict_for(
    request: Request,
    ingress: str,
    raw: bytes,
    report: Callable[[], ProviderReport] | None,
    *,
    rebuilt: bool = False,
) -> Verdict | None:
    """The verdict to hand ``ingest`` for ``raw``, which came through ``ingress`` (its
    password or signature already checked); None lets ``ingest`` check the raw message's
    DKIM itself. ``report`` reads the provider's own results, used only when the settings
    trust that ingress's; a ``rebuilt`` message (from parsed fields) proves nothing else."""
    if request.app.state.installation.config.mail.authentication.mode == "off":
        return None  # ingest records that nothing was checked
    verdict = None
    if report is not None and ingress in request.app.state.settings.trust_provider_verdicts:
        # Reading the report parses what the provider sent, and its DMARC lookup may wait on
        # DNS: off the event loop, as ingest is.
        resolver = resolver_of(request)
        verdict = await run_in_threadpool(lambda: provider_verdict(raw, report(), resolver))
        if verdict.authenticated:
            return verdict
    if not rebuilt:
        return None
    if verdict is not None:
        return verdict
    return unverified(
        f"rebuilt from the {ingress} webhook's parsed fields, which prove nothing by "
        "themselves (no provider verdicts trusted)",
        from_domain(raw),
    )
