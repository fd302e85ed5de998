import pytest

from protege.config import Config
from protege.testing import make_context
from protege.tool import check_tool_class
from the_scoop.tools import CheckFlavorStockTool, LookupOrderTool, ProcessRefundTool


@pytest.fixture
def context(tmp_path):
    return make_context(config=Config.defaults(tmp_path))


@pytest.mark.parametrize("tool", [LookupOrderTool, CheckFlavorStockTool, ProcessRefundTool])
def test_the_shop_tools_keep_the_contract(tool):
    check_tool_class(tool)


def test_lookup_order(context):
    result = LookupOrderTool().use(context, order_number="scp-1042")
    assert result.data == {
        "order_number": "SCP-1042",
        "flavor": "Mango Sorbet",
        "status": "delivered",
        "total_cents": 2450,
        "refunded": False,
    }
    assert LookupOrderTool().use(context, order_number="SCP-9").reason == "no order SCP-9"


def test_check_flavor_stock(context):
    assert CheckFlavorStockTool().use(context, flavor="pistachio").data == {
        "flavor": "Pistachio",
        "pints": 0,
        "in_stock": False,
    }
    assert not CheckFlavorStockTool().use(context, flavor="Durian").ok


def test_refund_happens_once(context):
    first = ProcessRefundTool().use(context, order_number="SCP-1042", reason="arrived melted")
    assert first.ok
    assert first.data["amount_cents"] == 2450
    again = ProcessRefundTool().use(context, order_number="SCP-1042", reason="again")
    assert again.reason == "order SCP-1042 was already refunded"
    assert LookupOrderTool().use(context, order_number="SCP-1042").data["status"] == "refunded"
