import attrs
import pytest

from protege.config import load_config
from protege.models import Agent, Toolkit
from protege.plugins import PluginHost
from protege.registry import Manifest, Origin, ToolEntry, build_manifest


def manifest_of(tools) -> Manifest:
    """A manifest offering exactly ``tools`` (test tool classes, as host tools)."""
    entries = sorted((ToolEntry(t, Origin.HOST, "tests") for t in tools), key=lambda e: e.id)
    return Manifest(tools=tuple(entries))


def agent_granted(tools) -> Agent:
    """An agent open to everyone, granted one toolkit holding ``tools``."""
    agent = Agent.create(name="Tester", address="tester@thescoop.example")
    agent.grant(Toolkit.create(name="Everything", member_tool_ids=[t.id for t in tools]))
    return agent


@pytest.fixture
def config(tmp_path, scripted_model, protege_db):
    """The configuration a run reads: the scripted model, The Scoop's tools, a temp data dir."""
    loaded = load_config(tmp_path)
    return attrs.evolve(loaded, tool_modules=("the_scoop.tools",))


@pytest.fixture
def scoop_tools(config):
    """The manifest of The Scoop's real host tools (and nothing else)."""
    return build_manifest(config, PluginHost(sources=()))


@pytest.fixture
def sundae(protege_db):
    """Sundae as in the toolkits seed: Support open to all, Finance for *@thescoop.com."""
    agent = Agent.create(
        name="Sundae", address="sundae@thescoop.example", instructions="Help customers."
    )
    support = Toolkit.create(name="Support", member_tool_ids=["lookup_order", "check_flavor_stock"])
    agent.grant(support)
    finance = Toolkit.create(name="Finance", member_tool_ids=["process_refund"])
    agent.grant(finance).add_rule("allow", "*@thescoop.com")
    return agent


@pytest.fixture
def shop(config):
    """The Scoop's own database, as the tools will find it."""
    from the_scoop.shop import open_shop

    open_shop(config.data_dir)
