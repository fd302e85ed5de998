"""The prompt sections of one attempt at a run: asked of the host's resolvers and the plugins,
checked, capped, and rendered (untrusted ones fenced) for the system prompt.

They are gathered once, when the attempt starts, from the run's own context and nothing
else: every turn of the attempt shows the model the same prompt, and nothing is kept from
one run for another.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, Protocol

import attrs

from protege.config import Config
from protege.context import RunContext
from protege.harness.fence import Fence
from protege.plugins import INTERNAL_DISTRIBUTION, PluginHost, error_line
from protege.registry import Manifest
from protege.result import Trust
from protege.sections import PromptSection
from protege.tool import titleize

logger = logging.getLogger(__name__)

HOST = "host"
HOOK = "prompt_sections"


class SectionSources(Protocol):
    """Where a run's sections come from: the host's resolvers (in the manifest), the
    plugins' hook, and the limits of ``[runs]``."""

    @property
    def config(self) -> Config: ...

    @property
    def manifest(self) -> Manifest: ...

    @property
    def plugins(self) -> PluginHost: ...


@attrs.frozen
class Included:
    """A section the prompt carries: as shown (cut to the limits), where it came from, and
    how long it was as given."""

    section: PromptSection
    origin: str  # "host", "builtin" (protege's own included) or "plugin"
    source: str  # the resolver class, or the plugin
    chars: int
    truncated: bool = False

    def record(self) -> dict[str, Any]:
        """What the run's trail keeps of it (its text is not kept: the trail stays light)."""
        return {
            "name": self.section.name,
            "trust": str(self.section.trust),
            "origin": self.origin,
            "source": self.source,
            "chars": self.chars,
            "truncated": self.truncated,
        }


@attrs.frozen
class LeftOut:
    """A section (or what a plugin gave in place of one) the prompt does not carry, and why."""

    name: str | None
    source: str
    reason: str

    def record(self) -> dict[str, Any]:
        """What the run's trail keeps of it."""
        return {"name": self.name, "source": self.source, "reason": self.reason}


@attrs.frozen
class RunSections:
    """The sections of one attempt at a run, in prompt order, and those left out."""

    included: tuple[Included, ...] = ()
    left_out: tuple[LeftOut, ...] = ()

    def render(self, fence: Fence) -> list[str]:
        """Each section as the system prompt shows it: a heading, then its text, fenced
        when untrusted; a note after it when it was cut."""
        shown = []
        for item in self.included:
            section = item.section
            heading = f"## {titleize(section.name)}"
            if section.trust is Trust.UNTRUSTED:
                body = fence.wrap(section.text, source=f"prompt section {section.name}")
            else:
                body = section.text
            note = (
                f"\n(protege: this section was cut to {len(section.text)} of its "
                f"{item.chars} characters.)"
                if item.truncated
                else ""
            )
            shown.append(f"{heading}\n{body}{note}")
        return shown

    def records(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The sections included and left out, as the model request event records them."""
        return [i.record() for i in self.included], [o.record() for o in self.left_out]


def gather(app: SectionSources, context: RunContext) -> RunSections:
    """The sections of the run ``context`` belongs to: the host's first, in the order its
    modules declare them, then the plugins', in the order pluggy calls them. Nothing any of
    them does stops the run: what fails is left out and logged."""
    run_logger = context.logger
    resolvers = app.manifest.resolvers
    offered: list[tuple[PromptSection, str, str]] = []
    left_out: list[LeftOut] = []
    for resolver in resolvers:
        source = f"{resolver.__module__}.{resolver.__qualname__}"
        try:
            text = resolver().resolve(context)
        except Exception as error:  # a resolver's bug costs its section, never the run
            run_logger.exception("prompt section %s (%s) raised", resolver.name, source)
            left_out.append(LeftOut(resolver.name, source, f"raised {error_line(error)}"))
            continue
        if text is None:
            continue
        if not isinstance(text, str):
            reason = f"returned {_kind(text)}, not text"
            left_out.append(LeftOut(resolver.name, source, reason))
            continue
        offered.append((PromptSection(resolver.name, text, resolver.trust), HOST, source))
    offered += _from_plugins(app, context, left_out)
    sections = _within_limits(offered, {r.name for r in resolvers}, app.config, left_out)
    for out in left_out:
        run_logger.warning(
            "prompt section %s from %s left out: %s", out.name or "?", out.source, out.reason
        )
    return attrs.evolve(sections, left_out=tuple(left_out))


def _from_plugins(
    app: SectionSources, context: RunContext, left_out: list[LeftOut]
) -> Iterator[tuple[PromptSection, str, str]]:
    """The sections the plugins' implementations return, each with its origin and the
    plugin it came from, in the order pluggy called them."""
    try:
        returned = app.plugins.call_with_plugins(HOOK, app=app, context=context)
    except Exception as error:  # each implementation is guarded; a wrapper's bug lands here
        context.logger.exception("the %s hook failed; no plugin sections this run", HOOK)
        left_out.append(LeftOut(None, "plugins", f"the hook raised {error_line(error)}"))
        return
    for plugin, value in returned:
        for item in value if isinstance(value, list | tuple) else [value]:
            if isinstance(item, PromptSection):
                yield item, plugin.source.origin, plugin.name
            elif item is not None:
                reason = f"returned {_kind(item)}, not a PromptSection"
                left_out.append(LeftOut(None, plugin.name, reason))


def _kind(value: object) -> str:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:59] + "…"
    return f"a {type(value).__name__} ({shown})"


def _within_limits(
    offered: list[tuple[PromptSection, str, str]],
    host_names: set[str],
    config: Config,
    left_out: list[LeftOut],
) -> RunSections:
    """The offered sections the prompt may carry: one per name (the host's wins over a
    plugin's), each cut to the section limit, until the total limit is spent."""
    each, total = config.runs.max_prompt_section_chars, config.runs.max_prompt_sections_chars
    included: list[tuple[int, Included]] = []
    taken: set[str] = set()
    spent = 0
    # Names and room go first to the host's sections, then to protege's own (pluggy calls
    # them last, yet no plugin may take their name or spend their room); the prompt keeps
    # the order the sections were offered in.
    ranked = sorted(
        enumerate(offered),
        key=lambda item: 0 if item[1][1] == HOST else 1 if _is_protege_own(item[1][2]) else 2,
    )
    for position, (section, origin, source) in ranked:
        name = section.name
        if origin != HOST and name in host_names:
            left_out.append(LeftOut(name, source, "the host app's resolver of this name wins"))
            continue
        if name in taken:
            left_out.append(LeftOut(name, source, "a section of this name came first"))
            continue
        if not section.text.strip():
            continue
        room = min(each, total - spent)
        if room <= 0:
            reason = f"max_prompt_sections_chars ({total}) was spent by the sections before it"
            left_out.append(LeftOut(name, source, reason))
            continue
        text = section.text[:room]
        spent += len(text)
        taken.add(name)
        truncated = len(text) < len(section.text)
        shown = attrs.evolve(section, text=text) if truncated else section
        included.append((position, Included(shown, origin, source, len(section.text), truncated)))
    return RunSections(included=tuple(entry for _, entry in sorted(included, key=_first)))


def _first(pair: tuple[int, Included]) -> int:
    return pair[0]


def _is_protege_own(source: str) -> bool:
    """Whether a section's source (a plugin's name, as reports give it) is protege itself."""
    return source.startswith(f"{INTERNAL_DISTRIBUTION} (")
