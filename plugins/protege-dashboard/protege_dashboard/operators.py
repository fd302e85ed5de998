"""Operator accounts: who may sign in to the dashboard."""

from __future__ import annotations

from protege import ProtegeError
from protege.models import Operator
from protege_dashboard.passwords import MIN_LENGTH, dummy_verify, hash_password, verify_password


def add_operator(name: str, password: str) -> Operator:
    """Create an operator; ``ProtegeError`` for a taken name or a short password."""
    name = name.strip()
    if not name or not name.isprintable() or len(name) > 200:
        raise ProtegeError("an operator needs a name: one line of at most 200 characters")
    if len(password) < MIN_LENGTH:
        raise ProtegeError(f"the password must have at least {MIN_LENGTH} characters")
    if Operator.get_or_none(Operator.name == name) is not None:
        raise ProtegeError(f"an operator named {name!r} already exists")
    return Operator.create(name=name, password_hash=hash_password(password))


def remove_operator(name: str) -> None:
    """Delete an operator; their open sessions end with their next request."""
    found = Operator.get_or_none(Operator.name == name)
    if found is None:
        raise ProtegeError(f"no operator named {name!r}")
    found.delete_instance()


def list_operators() -> list[Operator]:
    """Every operator, by name."""
    return list(Operator.select().order_by(Operator.name))


def authenticate(name: str, password: str) -> Operator | None:
    """The operator ``name`` if ``password`` is theirs; None otherwise (taking as long either
    way, so a guesser cannot tell which names exist)."""
    found = Operator.get_or_none(Operator.name == name)
    if found is None:
        dummy_verify(password)
        return None
    return found if verify_password(password, found.password_hash) else None
