"""Prompt sections: context a run's system prompt carries before the agent reaches for a tool.

A plugin returns ``PromptSection`` values from its ``prompt_sections`` hook. A host app
declares a ``Resolver`` in its tool modules, as it declares tools: subclassing declares one,
and its ``resolve(context)`` gives the section's text for one run::

    from protege import Resolver, Trust

    class OpenOrdersResolver(Resolver):
        trust = Trust.UNTRUSTED  # customers wrote parts of it

        def resolve(self, context):
            if context.message is None:
                return None  # nothing to say on a scheduled run
            return "\\n".join(order.line() for order in open_orders(context.message.sender))
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from protege.result import Trust
from protege.tool import tool_id_for

if TYPE_CHECKING:
    from protege.context import RunContext

SECTION_NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


def _check_name(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if not isinstance(value, str) or not SECTION_NAME_PATTERN.match(value):
        raise ValueError(
            f"a prompt section's name must match {SECTION_NAME_PATTERN.pattern}, not {value!r}"
        )


@attrs.frozen
class PromptSection:
    """One section of a run's system prompt: a ``name`` (lowercase, digits and ``_``; the
    model sees it as the section's heading), its ``text``, and its ``trust``.

    ``Trust.TRUSTED`` text is the operator's own and is shown as instructions are;
    ``Trust.UNTRUSTED`` text holds data from outside (mail, customers' records, the web) and
    is fenced as untrusted tool results are, so nothing in it can pass for an instruction.
    """

    name: str = attrs.field(validator=_check_name)
    text: str = attrs.field(validator=attrs.validators.instance_of(str))
    trust: Trust = attrs.field(default=Trust.TRUSTED, converter=Trust)


def section_name_for(class_name: str) -> str:
    """The section name a resolver class yields: ``OpenOrdersResolver`` gives
    ``open_orders``."""
    if class_name.endswith("Resolver"):
        class_name = class_name[: -len("Resolver")]
    return tool_id_for(class_name)


class Resolver:
    """Base class of a host app's prompt sections: subclass it in a tool module to declare one.

    The class name gives the section's name (``OpenOrdersResolver`` is ``open_orders``;
    set ``name`` to choose another). ``trust`` says whether its text is the operator's
    (the default) or outside data to be fenced. ``resolve(context)`` is called once at the
    start of each attempt at a run, in a worker thread that may use the database, with the
    run's ``RunContext``; it returns the text, or None (or ``""``) for no section this run.
    Set ``abstract = True`` on a shared base that is not itself a section.
    """

    abstract: ClassVar[bool] = True
    name: ClassVar[str]
    trust: ClassVar[Trust] = Trust.TRUSTED

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.abstract = bool(cls.__dict__.get("abstract", False))
        if "name" not in cls.__dict__:
            cls.name = section_name_for(cls.__name__)

    def resolve(self, context: RunContext) -> str | None:
        """This run's text of the section, or None for none; subclasses replace this."""
        raise NotImplementedError(f"{type(self).__name__} does not define resolve()")


def resolver_problems(resolver_class: type[Resolver]) -> list[str]:
    """Every way ``resolver_class`` breaks the resolver contract (none: it may be used)."""
    problems = []
    name = getattr(resolver_class, "name", None)
    if not isinstance(name, str) or not SECTION_NAME_PATTERN.match(name):
        problems.append(f"its name {name!r} must match {SECTION_NAME_PATTERN.pattern}")
    try:
        Trust(resolver_class.trust)
    except ValueError:
        problems.append(f"its trust {resolver_class.trust!r} is neither trusted nor untrusted")
    if resolver_class.resolve is Resolver.resolve:
        problems.append("it does not define resolve(context)")
    return problems
