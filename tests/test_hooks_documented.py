"""Every hook a plugin may implement is documented in the README with its real signature."""

import inspect
import re
from pathlib import Path

from protege import hookspecs

README = Path(__file__).parent.parent / "README.md"
HOOK_HEADING = re.compile(r"^#### (\w+)\(([^)]*)\)\s*$")


def hookspec_signatures() -> dict[str, list[str]]:
    """Each hook specification in protege.hookspecs, with its parameter names."""
    marker = f"{hookspecs.PROJECT_NAME}_spec"  # the attribute pluggy's HookspecMarker sets
    return {
        name: list(inspect.signature(function).parameters)
        for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
        if hasattr(function, marker)
    }


def documented_hooks() -> dict[str, tuple[list[str], str]]:
    """The README's "Hooks" section: each hook's parameter names and its description."""
    lines = README.read_text().splitlines()
    start = lines.index("### Hooks")
    end = next(
        (i for i in range(start + 1, len(lines)) if re.match(r"#{1,3} ", lines[i])), len(lines)
    )
    hooks: dict[str, tuple[list[str], str]] = {}
    current = None
    for line in lines[start + 1 : end]:
        heading = HOOK_HEADING.match(line)
        if heading:
            name, parameters = heading.groups()
            current = name
            hooks[name] = ([p.strip() for p in parameters.split(",") if p.strip()], "")
        elif current is not None:
            parameters, text = hooks[current]
            hooks[current] = (parameters, f"{text}\n{line}")
    return hooks


def test_the_specifications_are_found():
    assert set(hookspec_signatures()) >= {"register_tools", "register_commands"}


def test_every_hook_is_documented_with_its_signature_and_nothing_else_is():
    documented = {name: parameters for name, (parameters, _) in documented_hooks().items()}
    assert documented == hookspec_signatures()


def test_each_hooks_description_says_when_it_is_called_and_uses_its_parameters():
    for name, (parameters, text) in documented_hooks().items():
        assert "Called " in text, f"{name}: say when protege calls it"
        for parameter in parameters:
            assert f"`{parameter}`" in text, f"{name}: describe `{parameter}`"
