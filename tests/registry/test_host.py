from protege.registry import Origin, build_manifest
from protege.registry.host import host_tool_classes


def test_classes_defined_in_the_module_are_found_imported_ones_are_not(host_project):
    host_project.module(
        "shop_base",
        """
        from protege import Tool

        class ShopTool(Tool):
            abstract = True
            description = "Base of the shop's tools."

        class PingTool(Tool):
            description = "Pings."

            def use(self, context):
                return self.success()
        """,
    )
    host_project.module(
        "shop_tools",
        """
        from shop_base import PingTool, ShopTool

        class LookupOrderTool(ShopTool):
            description = "Looks up an order."

            def use(self, context):
                return self.success()
        """,
    )
    classes, errors = host_tool_classes("shop_tools", host_project.root)
    assert [c.id for c in classes] == ["lookup_order"]
    assert errors == []


def test_a_package_contributes_the_tools_of_its_submodules(host_project):
    tool = """
        from protege import Tool

        class {name}Tool(Tool):
            description = "Does {name}."

            def use(self, context):
                return self.success()
        """
    host_project.module("shop.tools.orders", tool.format(name="LookupOrder"))
    host_project.module("shop.tools.stock", tool.format(name="CheckFlavorStock"))
    manifest = build_manifest(host_project.config("shop.tools"), _no_plugins())
    assert manifest.ids() == ["check_flavor_stock", "lookup_order"]
    assert {e.origin for e in manifest} == {Origin.HOST}
    assert manifest.get("lookup_order").source == "shop.tools.orders"


def test_a_module_that_fails_to_import_is_reported_and_the_rest_load(host_project):
    host_project.module("broken_tools", "import no_such_dependency\n")
    host_project.module(
        "shop_tools",
        """
        from protege import Tool

        class PingTool(Tool):
            description = "Pings."

            def use(self, context):
                return self.success()
        """,
    )
    manifest = build_manifest(host_project.config("broken_tools", "shop_tools"), _no_plugins())
    assert manifest.ids() == ["ping"]
    (rejected,) = manifest.rejected
    assert rejected.origin is Origin.HOST
    assert rejected.reason == (
        "cannot import tool module broken_tools: "
        "ModuleNotFoundError: No module named 'no_such_dependency'"
    )


def test_a_host_class_that_breaks_the_contract_is_rejected(host_project):
    host_project.module(
        "shop_tools",
        """
        from protege import Tool

        class RefundTool(Tool):
            description = "Refunds."
            input_schema = {"type": "object", "properties": {"amount": {"type": "integer"}}}

            def use(self, context):
                return self.success()
        """,
    )
    manifest = build_manifest(host_project.config("shop_tools"), _no_plugins())
    assert manifest.ids() == []
    assert manifest.rejected[0].reason == (
        "RefundTool: input_schema property 'amount' is not a parameter of use()"
    )


def _no_plugins():
    from protege.plugins import PluginHost

    return PluginHost(sources=())


def test_a_module_raising_keyboard_interrupt_on_import_is_reported(host_project):
    host_project.module("hostile_tools", "raise KeyboardInterrupt('stop')\n")
    manifest = build_manifest(host_project.config("hostile_tools"), _no_plugins())
    (rejected,) = manifest.rejected
    assert rejected.reason == "cannot import tool module hostile_tools: KeyboardInterrupt: stop"
