"""The Scoop's tools: how Sundae reaches into the shop."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from peewee import fn

from protege import Tool
from the_scoop.shop import Flavor, Order, Refund, open_shop, shop_db


class ShopTool(Tool):
    """Base of the shop's tools: opens the shop's database in protege's data directory."""

    abstract = True

    @contextlib.contextmanager
    def shop(self, context) -> Iterator[None]:
        """The shop's database, on a connection of this call's own: protege keeps its tool
        threads between calls, and a connection left on one would outlive the call."""
        open_shop(context.config.data_dir)
        if not shop_db.is_closed():  # left by an earlier call on this thread
            shop_db.close()
        with shop_db.connection_context():
            yield


class LookupOrderTool(ShopTool):
    description = (
        "Looks up an order by its number (like SCP-1042) and returns its flavor, status, "
        "total and whether it was refunded. Use it before answering any question about an "
        "order."
    )
    summary = "Look up an order by number."
    input_schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["order_number"],
        "properties": {"order_number": {"type": "string", "description": "e.g. SCP-1042"}},
    }

    def use(self, context, order_number):
        with self.shop(context):
            order = Order.get_or_none(Order.number == order_number.strip().upper())
            if order is None:
                return self.failure(f"no order {order_number}")
            return self.success(
                order_number=order.number,
                flavor=order.flavor,
                status=order.status,
                total_cents=order.total_cents,
                refunded=order.refunds.exists(),
            )


class CheckFlavorStockTool(ShopTool):
    description = "Tells how many pints of a flavor are in stock. Use it before promising a flavor."
    summary = "Pints in stock for a flavor."
    input_schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["flavor"],
        "properties": {"flavor": {"type": "string"}},
    }

    def use(self, context, flavor):
        with self.shop(context):
            found = Flavor.get_or_none(fn.LOWER(Flavor.name) == flavor.strip().lower())
        if found is None:
            return self.failure(f"The Scoop does not make {flavor}")
        return self.success(flavor=found.name, pints=found.pints, in_stock=found.pints > 0)


class ProcessRefundTool(ShopTool):
    description = (
        "Refunds an order in full and marks it refunded. Only for refunds the shop has "
        "approved; an order is refunded at most once."
    )
    summary = "Refund an order in full."
    input_schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["order_number", "reason"],
        "properties": {
            "order_number": {"type": "string"},
            "reason": {"type": "string", "minLength": 1},
        },
    }

    def use(self, context, order_number, reason):
        with self.shop(context), shop_db.atomic():
            order = Order.get_or_none(Order.number == order_number.strip().upper())
            if order is None:
                return self.failure(f"no order {order_number}")
            if order.refunds.exists():
                return self.failure(f"order {order.number} was already refunded")
            refund = Refund.create(order=order, amount_cents=order.total_cents, reason=reason)
            order.status = "refunded"
            order.save()
        return self.success(
            refund_id=refund.id, order_number=order.number, amount_cents=refund.amount_cents
        )
