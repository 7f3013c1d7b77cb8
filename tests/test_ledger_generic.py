"""The ledger's storage over any contract (store/layout.py, store/key_index.py, publish/lookup.py,
maintenance/compact.py): the orders ledger is byte-compatible with what lakepub always wrote, and a
composite-key contract gets the same guarantees (index lookups and the join agree with brute force,
compaction keeps the latest version per entity with its floor and history)."""

from __future__ import annotations

from dataclasses import replace
from datetime import date
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.types import BooleanType, DateType, LongType, NestedField, StringType

from lakepub.contract.model import Contract, Entity, FieldSpec, load_contract
from lakepub.contract.orders import ORDERS_CONTRACT
from lakepub.contract.types import FieldType
from lakepub.store import layout

# What lakepub created before contracts: existing ledgers have exactly these schemas.
OLD_LEDGER_SCHEMA = Schema(
    NestedField(1, "order_id", StringType(), required=False),
    NestedField(2, "version", LongType(), required=False),
    NestedField(3, "day", DateType(), required=False),
    NestedField(4, "cents", LongType(), required=False),
    NestedField(5, "deleted", BooleanType(), required=False),
    NestedField(6, "batch_id", StringType(), required=False),
    NestedField(7, "floor", LongType(), required=False),
    NestedField(8, "k1", LongType(), required=False),
    NestedField(9, "k2", LongType(), required=False),
)
OLD_LEDGER_ARROW = pa.schema(
    [("order_id", pa.string()), ("version", pa.int64()), ("day", pa.date32()), ("cents", pa.int64()),
     ("deleted", pa.bool_()), ("batch_id", pa.string()), ("floor", pa.int64()), ("k1", pa.int64()),
     ("k2", pa.int64())])
OLD_HISTORY_ARROW = pa.field("history", pa.list_(pa.struct(
    [("version", pa.int64()), ("day", pa.date32()), ("cents", pa.int64()), ("deleted", pa.bool_())])))


def _t(name: str) -> FieldType:
    return FieldType.parse(name)


# A composite key of mixed types, an int version named otherwise, and state of several types.
SHOP = Contract(
    name="shop_items", version="1.0",
    entity=Entity(key=("shop", "item", "since"), version="seq", deleted="gone"),
    fields=(
        FieldSpec("shop", _t("string")), FieldSpec("seq", _t("int")), FieldSpec("item", _t("long")),
        FieldSpec("since", _t("date")), FieldSpec("label", _t("string"), nullable=True),
        FieldSpec("price", _t("decimal(12,2)"), nullable=True), FieldSpec("gone", _t("boolean")),
    ),
)


def test_the_orders_contract_constant_is_the_template_contract():
    template = Path(__file__).parents[1] / "lakepub/templates/catalog/contracts/orders@v1.0.yaml"
    assert replace(load_contract(template), path=None) == ORDERS_CONTRACT


def test_the_orders_ledger_schema_is_unchanged():
    iceberg, arrow = layout.ledger_schema(ORDERS_CONTRACT)
    assert iceberg == OLD_LEDGER_SCHEMA and [f.field_id for f in iceberg.fields] == list(range(1, 10))
    assert str(iceberg) == str(OLD_LEDGER_SCHEMA)
    assert arrow.equals(OLD_LEDGER_ARROW, check_metadata=True)
    assert layout.LEDGER_SCHEMA == OLD_LEDGER_SCHEMA and layout.LEDGER_ARROW.equals(OLD_LEDGER_ARROW)
    assert layout.HISTORY_ARROW.equals(OLD_HISTORY_ARROW)


def test_a_composite_key_ledger_schema():
    iceberg, arrow = layout.ledger_schema(SHOP)
    assert arrow.names == ["shop", "seq", "item", "since", "label", "price", "gone", "batch_id", "floor", "k1", "k2"]
    assert [f.field_id for f in iceberg.fields] == list(range(1, 12))
    assert not any(f.required for f in iceberg.fields)
    assert arrow.field("seq").type == pa.int32() and arrow.field("price").type == pa.decimal128(12, 2)
    assert str(iceberg.find_field("price").field_type) == "decimal(12, 2)"
    assert layout.history_arrow(SHOP).type.value_type.names == ["version", "label", "price", "gone"]
