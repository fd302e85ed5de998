"""Collecting the tool and resolver classes of the host application's own modules."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import TypeVar

from protege.plugins import error_line
from protege.sections import Resolver
from protege.tool import Tool

_Declared = TypeVar("_Declared", Tool, Resolver)


def host_tool_classes(module_name: str, root: Path) -> tuple[list[type[Tool]], list[str]]:
    """The concrete ``Tool`` subclasses defined in a module and its submodules, and the
    import errors met on the way (one line each).

    Only classes defined in those modules count: a class a module merely imports belongs to
    the module that defines it. ``root`` (the folder of ``protege.toml``) is put on
    ``sys.path`` so the host's modules import as they do in the app.
    """
    return _defined_in(module_name, root, Tool)


def host_resolver_classes(module_name: str, root: Path) -> tuple[list[type[Resolver]], list[str]]:
    """The concrete ``Resolver`` subclasses defined in a module and its submodules, in the
    order they are defined, and the import errors met on the way (as ``host_tool_classes``)."""
    return _defined_in(module_name, root, Resolver)


def _defined_in(
    module_name: str, root: Path, base: type[_Declared]
) -> tuple[list[type[_Declared]], list[str]]:
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    classes: list[type[_Declared]] = []
    errors: list[str] = []
    for module in _modules_of(module_name, errors):
        classes.extend(
            value
            for value in list(vars(module).values())
            if isinstance(value, type)
            and issubclass(value, base)
            and value.__module__ == module.__name__
            and not value.abstract
        )
    return classes, errors


def _modules_of(name: str, errors: list[str]) -> list[ModuleType]:
    module = _import(name, errors)
    if module is None:
        return []
    modules = [module]
    if hasattr(module, "__path__"):
        import pkgutil  # only a host whose tool module is a package needs it

        for info in pkgutil.walk_packages(
            module.__path__, prefix=f"{name}.", onerror=lambda _name: None
        ):
            submodule = _import(info.name, errors)
            if submodule is not None:
                modules.append(submodule)
    return modules


def _import(name: str, errors: list[str]) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except BaseException as error:  # a module may raise anything while importing
        errors.append(f"cannot import tool module {name}: {error_line(error)}")
        return None
