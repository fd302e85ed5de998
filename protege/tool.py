"""The tool contract: declaring a tool by subclassing ``Tool``, and checking a declaration."""

from __future__ import annotations

import inspect
import math
import re
import types
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from protege.errors import InvalidTool
from protege.result import Result, Trust, failure, success
from protege.schema import schema_problem

if TYPE_CHECKING:
    from protege.context import RunContext

TOOL_ID_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
DEFAULT_TIMEOUT = 30.0
EMPTY_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {},
    "additionalProperties": False,
}

_ACRONYM_BOUNDARY = re.compile(r"([A-Z]+)([A-Z][a-z])")
_WORD_BOUNDARY = re.compile(r"([a-z0-9])([A-Z])")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
_DERIVED_ATTRIBUTES = ("display_name", "summary")
# What ``Tool.annotations`` may say of a tool's calls (the Model Context Protocol's hints).
ANNOTATION_KEYS = ("read_only", "destructive", "idempotent", "open_world")


def tool_id_for(class_name: str) -> str:
    """The tool id a class name yields: ``HTTPFetchTool`` gives ``http_fetch``."""
    if class_name.endswith("Tool"):
        class_name = class_name[: -len("Tool")]
    snake = _ACRONYM_BOUNDARY.sub(r"\1_\2", class_name)
    snake = _WORD_BOUNDARY.sub(r"\1_\2", snake)
    return snake.lower()


def titleize(tool_id: str) -> str:
    """The human label for an id: ``lookup_order`` gives ``Lookup Order``."""
    return " ".join(word.capitalize() for word in tool_id.split("_") if word)


def first_sentence(text: str) -> str:
    """The first sentence (or first line) of a description, for the operator-facing summary."""
    text = " ".join(text.strip().splitlines()[0].split()) if text.strip() else ""
    return _SENTENCE_END.split(text, maxsplit=1)[0]


class Tool:
    """Base class of every tool: subclass it to declare one.

    The class name gives the tool id (``LookupOrderTool`` is ``lookup_order``). ``description``
    and ``input_schema`` are what the model sees; ``display_name`` and ``summary`` are for
    operators. ``use(context, **input)`` does the work (``def`` or ``async def``) and returns
    ``self.success(...)`` or ``self.failure(...)``. Set ``abstract = True`` on a shared base
    class that is not itself a tool. ``requires_approval = True`` makes every call wait for
    an approver's yes on every agent, whichever toolkit gives the tool. ``preload`` names the
    modules ``use`` imports on first use (to keep building the manifest light): a serving
    process imports them before it takes runs, so that two runs' threads never import them
    at the same moment.
    """

    abstract: ClassVar[bool] = True
    id: ClassVar[str]
    description: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    display_name: ClassVar[str] = ""
    input_schema: ClassVar[dict[str, Any]] = EMPTY_INPUT_SCHEMA
    timeout: ClassVar[float] = DEFAULT_TIMEOUT
    trust: ClassVar[Trust] = Trust.TRUSTED
    requires_approval: ClassVar[bool] = False
    preload: ClassVar[tuple[str, ...]] = ()
    # Hints for operators deciding who may use the tool, shown by `protege tools` and the
    # dashboard: ``read_only``, ``destructive``, ``idempotent``, ``open_world`` (True/False;
    # leave out what is not known). Hints only: nothing is allowed or refused by them.
    annotations: ClassVar[Mapping[str, bool]] = {}
    # The outside server that carries out the tool's calls (an MCP server's name), if any.
    server: ClassVar[str | None] = None

    _explicit: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.abstract = bool(cls.__dict__.get("abstract", False))
        cls.id = tool_id_for(cls.__name__)
        cls._explicit = cls._explicit | {a for a in _DERIVED_ATTRIBUTES if a in cls.__dict__}
        if "display_name" not in cls._explicit:
            cls.display_name = titleize(cls.id)
        if "summary" not in cls._explicit:
            cls.summary = (
                first_sentence(cls.description) if isinstance(cls.description, str) else ""
            )

    if TYPE_CHECKING:
        # Each tool declares its own keyword parameters (from its input schema), sync or
        # async: to a type checker, any such signature is a valid ``use``.
        use: Callable[..., Result | Awaitable[Result]]
    else:

        def use(self, context: RunContext, **input: Any) -> Result:
            """Carry out the tool's action; subclasses replace this."""
            raise NotImplementedError(f"{type(self).__name__} does not define use()")

    def success(self, *, parts: Any = (), **data: Any) -> Result:
        """A successful result, marked with this tool's trust; ``parts`` are ``Part`` files
        (images, PDFs) shown to the model as themselves."""
        return _with_trust(success(parts=parts, **data), self.trust)

    def failure(self, reason: str | BaseException, **data: Any) -> Result:
        """A failed result, marked with this tool's trust."""
        return _with_trust(failure(reason, **data), self.trust)


def _with_trust(result: Result, trust: Trust) -> Result:
    return result.untrusted() if Trust(trust) is Trust.UNTRUSTED else result


def is_async(tool_class: type[Tool]) -> bool:
    """Whether the tool's ``use`` is a coroutine function."""
    return inspect.iscoroutinefunction(tool_class.use)


def check_tool_class(tool_class: object) -> None:
    """Raise ``InvalidTool`` naming every way ``tool_class`` breaks the tool contract."""
    if not (isinstance(tool_class, type) and issubclass(tool_class, Tool)):
        raise InvalidTool(f"{tool_class!r} is not a subclass of protege.Tool")
    if tool_class.abstract:
        raise InvalidTool(f"{tool_class.__qualname__} is abstract (abstract = True)")
    try:
        schema_problems = _schema_and_signature_problems(tool_class)
    except Exception as error:  # a schema from outside that breaks the checker itself
        schema_problems = [f"input_schema cannot be checked ({type(error).__name__})"]
    problems = [*_id_problems(tool_class), *_metadata_problems(tool_class), *schema_problems]
    if problems:
        raise InvalidTool(f"{tool_class.__qualname__}: " + "; ".join(problems))


def _id_problems(tool_class: type[Tool]) -> list[str]:
    if TOOL_ID_PATTERN.match(tool_class.id):
        return []
    return [f"its id {tool_class.id!r} (from the class name) must match {TOOL_ID_PATTERN.pattern}"]


def _metadata_problems(tool_class: type[Tool]) -> list[str]:
    problems = []
    for name in ("description", "summary", "display_name"):
        value = getattr(tool_class, name)
        if not isinstance(value, str) or not value.strip():
            problems.append(f"{name} must be a non-empty string")
            if name == "description":
                break  # the summary derives from it: one complaint is enough
    timeout = tool_class.timeout
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        problems.append("timeout must be a number of seconds")
    elif not (timeout > 0 and math.isfinite(timeout)):
        problems.append("timeout must be a positive, finite number of seconds")
    try:
        Trust(tool_class.trust)
    except ValueError:
        problems.append("trust must be 'trusted' or 'untrusted'")
    if not isinstance(tool_class.requires_approval, bool):
        problems.append("requires_approval must be True or False")
    preload = tool_class.preload
    if not isinstance(preload, tuple) or not all(
        isinstance(name, str) and name for name in preload
    ):
        problems.append("preload must be a tuple of module names")
    annotations = tool_class.annotations
    if not isinstance(annotations, Mapping) or not all(
        key in ANNOTATION_KEYS and isinstance(value, bool) for key, value in annotations.items()
    ):
        problems.append(
            f"annotations must map some of {', '.join(ANNOTATION_KEYS)} to True or False"
        )
    server = tool_class.server
    if server is not None and not (isinstance(server, str) and server.strip()):
        problems.append("server must be None or a non-empty string")
    return problems


def _schema_and_signature_problems(tool_class: type[Tool]) -> list[str]:
    schema = tool_class.input_schema
    if not isinstance(schema, dict):
        return ["input_schema must be a dict holding a JSON Schema"]
    problem = schema_problem(schema)
    if problem is not None:
        return [f"input_schema is not valid JSON Schema: {problem}"]
    if schema.get("type") != "object":
        return ['input_schema must describe an object ("type": "object")']
    if tool_class.use is Tool.use:
        return ["it does not define use()"]
    return _signature_problems(tool_class, schema)


_Parameter = tuple[str, inspect._ParameterKind, bool]  # name, kind, has a default


def _use_parameters(use: Callable[..., Any]) -> list[_Parameter]:
    """The parameters of a ``use`` method after ``self``, as ``inspect.signature`` gives
    them: each one's name, kind, and whether it has a default.

    A plain function is read from its code object, as ``inspect.signature`` itself reads
    it, unless something on the function (a ``__wrapped__``, a ``__signature__``) could
    make the signature say otherwise: it is checked for every tool of every manifest, and
    ``inspect.signature`` costs several times more.
    """
    code = getattr(use, "__code__", None)
    if type(use) is not types.FunctionType or use.__dict__ or code is None or not code.co_argcount:
        return [
            (p.name, p.kind, p.default is not p.empty)
            for p in list(inspect.signature(use).parameters.values())[1:]
        ]
    P = inspect.Parameter
    names, positional_count = code.co_varnames, code.co_argcount
    keyword_count = code.co_kwonlyargcount
    first_default = positional_count - len(use.__defaults__ or ())
    keyword_defaults = use.__kwdefaults__ or {}
    parameters: list[_Parameter] = [
        (
            name,
            P.POSITIONAL_ONLY if i < code.co_posonlyargcount else P.POSITIONAL_OR_KEYWORD,
            i >= first_default,
        )
        for i, name in enumerate(names[:positional_count])
    ]
    after = positional_count + keyword_count  # then *args, then **kwargs, if any
    if code.co_flags & inspect.CO_VARARGS:
        parameters.append((names[after], P.VAR_POSITIONAL, False))
        after += 1
    parameters += [
        (name, P.KEYWORD_ONLY, name in keyword_defaults)
        for name in names[positional_count : positional_count + keyword_count]
    ]
    if code.co_flags & inspect.CO_VARKEYWORDS:
        parameters.append((names[after], P.VAR_KEYWORD, False))
    return parameters[1:]


def _signature_problems(tool_class: type[Tool], schema: dict[str, Any]) -> list[str]:
    parameters = _use_parameters(tool_class.use)
    P = inspect.Parameter
    accepts_any = any(kind is P.VAR_KEYWORD for _, kind, _ in parameters)
    named = {
        name: has_default
        for name, kind, has_default in parameters
        if kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)
    }
    problems = [
        f"use() parameter {name!r} is positional-only, so it cannot be passed by name"
        for name, kind, _ in parameters
        if kind is P.POSITIONAL_ONLY
    ]
    if "context" not in named and not accepts_any:
        problems.append("use() must accept the run context as a parameter named 'context'")
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if "context" in properties:
        problems.append("input_schema may not have a property named 'context' (it is reserved)")
    if not accepts_any:
        problems.extend(
            f"input_schema property {name!r} is not a parameter of use()"
            for name in dict.fromkeys([*properties, *required])
            if name not in named and name != "context"
        )
    problems.extend(
        f"use() parameter {name!r} has no default, so input_schema must list it as required"
        for name, has_default in named.items()
        if name != "context" and not has_default and name not in required
    )
    return problems
