"""The ledger's storage over any contract (store/layout.py, store/key_index.py, publish/lookup.py,
maintenance/compact.py): the orders ledger is byte-compatible with what lakepub always wrote, and a
composite-key contract gets the same guarantees (index lookups and the join agree with brute force,
compaction keeps the latest version per entity with its floor and history)."""

from __future__ import annotations

from dataclasses import replace
from datetime import date
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import BooleanType, DateType, LongType, NestedField, StringType

from lakepub.contract.model import Contract, Entity, FieldSpec, load_contract
from lakepub.contract.orders import ORDERS_CONTRACT
from lakepub.contract.types import FieldType
from lakepub.keys import entity_keys
from lakepub.store import key_index, layout

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


OLD_INDEX_SCHEMA = pa.schema([
    ("k1", pa.int64()), ("k2", pa.int32()), ("version", pa.int64()), ("day", pa.date32()),
    ("cents", pa.int64()), ("deleted", pa.bool_()), ("compacted", pa.bool_()),
])


def test_the_orders_index_schema_is_unchanged():
    assert key_index.index_schema(ORDERS_CONTRACT).equals(OLD_INDEX_SCHEMA, check_metadata=True)
    assert key_index.INDEX_SCHEMA.equals(OLD_INDEX_SCHEMA)
    assert key_index.PAYLOAD == ["version", "day", "cents", "deleted", "floor"]


def test_a_composite_key_index_schema():
    schema = key_index.index_schema(SHOP)
    assert schema.names == ["k1", "k2", "version", "label", "price", "gone", "compacted"]
    assert key_index.payload_schema(schema).names == ["version", "label", "price", "gone", "floor"]
    clash = replace(SHOP, fields=SHOP.fields + (FieldSpec("version", _t("long")),))
    with pytest.raises(ValueError, match="version"):
        key_index.index_schema(clash)


# --- generic rows ------------------------------------------------------------------------------

SHOPS = ["", "a", "ab", "b", "é"]
DAYS = [date(2024, 1, 1), date(2024, 1, 2), date(1999, 12, 31)]
KEY = list(SHOP.entity.key)


def _entity_table(rng: np.random.Generator, n: int) -> pa.Table:
    """``n`` random entity keys (with repeats)."""
    return pa.table({
        "shop": pa.array([SHOPS[i] for i in rng.integers(0, len(SHOPS), n)], pa.string()),
        "item": pa.array(rng.integers(-3, 40, n), pa.int64()),
        "since": pa.array([DAYS[i] for i in rng.integers(0, len(DAYS), n)], pa.date32()),
    })


def _shop_rows(rng: np.random.Generator, entities: pa.Table, first_version: int, batch: str) -> pa.Table:
    """One ledger row per entity at versions first_version.. (1-3 of them), random state."""
    keys = sorted(set(zip(*(entities.column(k).to_pylist() for k in KEY))), key=repr)
    out = []
    for shop, item, since in keys:
        for v in range(first_version, first_version + int(rng.integers(1, 4))):
            gone = bool(rng.random() < 0.2)
            out.append({"shop": shop, "seq": v, "item": item, "since": since,
                        "label": None if gone or rng.random() < 0.3 else f"l{int(rng.integers(0, 9))}",
                        "price": None if gone else Decimal(int(rng.integers(0, 10**6))) / 100, "gone": gone,
                        "batch_id": batch, "floor": None})
    table = pa.Table.from_pylist(out, schema=pa.schema([f for f in layout.ledger_schema(SHOP)[1]
                                                        if f.name not in ("k1", "k2")]))
    k1, k2 = entity_keys(table, KEY)
    return table.append_column("k1", pa.array(k1)).append_column("k2", pa.array(k2))


def _key(row: dict) -> tuple:
    return tuple(row[k] for k in KEY)


def _brute(ledger_rows: list[dict], entities: pa.Table) -> list[tuple]:
    """What a lookup must return: every ledger row (and history entry) of the entities, with the
    entity's position, as (position, version, label, price, gone, floor)."""
    where = {key: i for i, key in enumerate(zip(*(entities.column(k).to_pylist() for k in KEY)))}
    out = []
    for row in ledger_rows:
        i = where.get(_key(row))
        if i is None:
            continue
        out.append((i, row["seq"], row["label"], row["price"], row["gone"], row["floor"]))
        for h in row.get("history") or []:
            out.append((i, h["version"], h["label"], h["price"], h["gone"], None))
    return sorted(out, key=repr)


def _as_found(found: tuple[pa.Table, np.ndarray]) -> list[tuple]:
    table, positions = found
    assert table.schema.equals(key_index.payload_schema(key_index.index_schema(SHOP)))
    return sorted(((int(i), *(r[c] for c in table.column_names)) for i, r in zip(positions, table.to_pylist())),
                  key=repr)


def _distinct(entities: pa.Table) -> pa.Table:
    keys = sorted(set(zip(*(entities.column(k).to_pylist() for k in KEY))), key=repr)
    return pa.table({k: pa.array([key[j] for key in keys], entities.schema.field(k).type) for j, k in enumerate(KEY)})


def test_composite_key_runs_written_merged_and_looked_up_match_brute_force(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(key_index, "BATCH_ROWS", 40)  # merges in many key ranges
    rng = np.random.default_rng(11)
    schema = key_index.index_schema(SHOP)
    index = key_index.KeyIndex(tmp_path / "index", schema)
    runs: list[key_index.Run] = []
    parts: list[pa.Table] = []
    for step in range(12):
        rows = _shop_rows(rng, _entity_table(rng, int(rng.choice([3, 20, 60]))), 1 + 3 * step, f"b{step}")
        floor = pa.array(rows.column("seq").to_numpy().astype(np.int64), mask=rng.random(rows.num_rows) < 0.7)
        rows = rows.set_column(rows.schema.get_field_index("floor"), "floor", floor)
        parts.append(rows)
        runs = index.append(runs, key_index.index_rows(rows, SHOP))
        for run in runs:
            assert all(b.schema.equals(schema) for b in index.batches(run))  # self-describing runs
        all_rows = pa.concat_tables(parts)
        probe = _distinct(pa.concat_tables([_entity_table(rng, 30), all_rows.select(KEY).slice(0, 10)]))
        found = index.lookup(runs, *entity_keys(probe, KEY))
        assert _as_found(found) == _brute(all_rows.to_pylist(), probe)
    assert len(runs) < 12  # merged
    assert sum(r.rows for r in runs) == sum(p.num_rows for p in parts)
    assert _as_found(index.lookup(runs, *entity_keys(_distinct(_entity_table(rng, 0)), KEY))) == []
