"""The host app's resolvers: found in its tool modules as its tools are, checked, one per name."""

from protege.plugins import PluginHost
from protege.registry import Origin, build_manifest


def test_resolvers_defined_in_the_host_modules_are_collected_in_order(host_project):
    host_project.module(
        "shop_sections",
        """
        from protege import Resolver, Trust

        class ShopResolver(Resolver):
            abstract = True

        class ShopHoursResolver(ShopResolver):
            def resolve(self, context):
                return "Nine to five."

        class CustomerNotesResolver(Resolver):
            trust = Trust.UNTRUSTED
            name = "notes"

            def resolve(self, context):
                return None
        """,
    )
    manifest = build_manifest(host_project.config("shop_sections"), PluginHost(sources=()))
    assert [(r.name, str(r.trust)) for r in manifest.resolvers] == [
        ("shop_hours", "trusted"),
        ("notes", "untrusted"),
    ]
    assert manifest.rejected == ()


def test_a_resolver_that_breaks_the_contract_is_rejected_and_reported(host_project):
    host_project.module(
        "shop_sections",
        """
        from protege import Resolver

        class SilentResolver(Resolver):
            pass

        class BadNameResolver(Resolver):
            name = "Bad Name"

            def resolve(self, context):
                return "x"

        class HoursResolver(Resolver):
            def resolve(self, context):
                return "Nine to five."

        class OtherHoursResolver(Resolver):
            name = "hours"

            def resolve(self, context):
                return "Never."
        """,
    )
    manifest = build_manifest(host_project.config("shop_sections"), PluginHost(sources=()))
    assert [r.__name__ for r in manifest.resolvers] == ["HoursResolver"]
    assert [(r.origin, r.source, r.reason) for r in manifest.rejected] == [
        (
            Origin.HOST,
            "shop_sections",
            "resolver SilentResolver: it does not define resolve(context)",
        ),
        (
            Origin.HOST,
            "shop_sections",
            "resolver BadNameResolver: its name 'Bad Name' must match ^[a-z][a-z0-9_]{0,63}$",
        ),
        (
            Origin.HOST,
            "shop_sections",
            "resolver OtherHoursResolver: its name 'hours' is taken by HoursResolver",
        ),
    ]
    assert any("OtherHoursResolver" in line for line in manifest.problems())
