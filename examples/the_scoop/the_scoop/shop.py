"""The Scoop's own records (orders, flavors, refunds) in a SQLite file of the shop's own.

This is the host application's data, not protege's: the tools in ``the_scoop.tools`` reach
into it the way a real app's tools reach into its models.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import peewee

shop_db = peewee.SqliteDatabase(None, pragmas={"journal_mode": "wal", "foreign_keys": 1})

SAMPLE_ORDERS = [
    ("SCP-1042", "jane@acme.com", "Mango Sorbet", "delivered", 2450),
    ("SCP-1043", "jane@acme.com", "Pistachio", "preparing", 1800),
    ("SCP-1044", "sam@example.org", "Vanilla Bean", "delivered", 1200),
]
SAMPLE_FLAVORS = [("Mango Sorbet", 14), ("Pistachio", 0), ("Vanilla Bean", 32)]


class ShopRecord(peewee.Model):
    class Meta:
        database = shop_db


class Order(ShopRecord):
    """An order placed with the shop."""

    number = peewee.CharField(unique=True)
    customer = peewee.CharField()
    flavor = peewee.CharField()
    status = peewee.CharField()
    total_cents = peewee.IntegerField()


class Flavor(ShopRecord):
    """A flavor and how many pints are in the freezer."""

    name = peewee.CharField(unique=True)
    pints = peewee.IntegerField()


class Refund(ShopRecord):
    """Money given back for an order; at most one per order."""

    order = peewee.ForeignKeyField(Order, unique=True, backref="refunds")
    amount_cents = peewee.IntegerField()
    reason = peewee.TextField()
    created_at = peewee.DateTimeField(default=lambda: datetime.datetime.now(datetime.UTC))


def open_shop(data_dir: Path) -> None:
    """Open the shop's database in ``data_dir``, creating and stocking it on first use."""
    path = str(Path(data_dir) / "the_scoop.db")
    if shop_db.database == path:
        return
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    shop_db.init(path)
    with shop_db.atomic():
        shop_db.create_tables([Order, Flavor, Refund])
        if not Order.select().exists():
            for number, customer, flavor, status, total in SAMPLE_ORDERS:
                Order.create(
                    number=number,
                    customer=customer,
                    flavor=flavor,
                    status=status,
                    total_cents=total,
                )
            for name, pints in SAMPLE_FLAVORS:
                Flavor.create(name=name, pints=pints)
