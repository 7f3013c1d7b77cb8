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

from lakepub import duck, reports
from lakepub.contract.model import Contract, Entity, FieldSpec, load_contract
from lakepub.contract.orders import ORDERS_CONTRACT
from lakepub.contract.types import FieldType
from lakepub.keys import ORDER_KEYS_VERSION, entity_keys
from lakepub.maintenance import compact
from lakepub.publish.lookup import Entities, LedgerLookup, scan_rows
from lakepub.store import key_index, layout
from lakepub.workspace import Workspace

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


# --- a composite-key ledger table: the join lookup, compaction, its index, verify --deep ----------


def _ledger(ws: Workspace):
    return layout.ensure_ledger(ws.catalog, ws.config.namespace, "shop_items", SHOP)


def test_a_composite_key_ledger_table_is_sorted_by_its_key_and_keeps_its_keys_version(ws: Workspace):
    ledger = _ledger(ws)
    assert ledger.schema() == layout.ledger_schema(SHOP)[0]
    assert [f.source_id for f in ledger.sort_order().fields] == [1, 3, 4]  # shop, item, since
    assert layout.order_keys_version(ledger) == ORDER_KEYS_VERSION
    assert layout.ledger_arrow(ledger, SHOP).equals(layout.ledger_schema(SHOP)[1])
    # Reloading (another writer) gives the same table.
    assert _ledger(ws).metadata.table_uuid == ledger.metadata.table_uuid


def _lookups(con, ledger, snapshot_id: int, probe: pa.Table, history: bool) -> list[list[tuple]]:
    """The same rows by the lookup's join on (k1, k2), and by a join on the key fields."""
    entities = Entities(probe, tuple(KEY))
    scan = duck.scan_sql(ledger.metadata_location, snapshot_id)
    by_keys = LedgerLookup(lambda: con, ledger.location(), use_index=False, contract=SHOP).rows(
        ledger, snapshot_id, entities)
    by_fields = scan_rows(con, scan, entities, keyed=False, history=history, contract=SHOP)
    return [_as_found(by_keys), _as_found(by_fields)]


def test_composite_key_join_lookup_and_compaction_with_floor_and_history(ws: Workspace):
    rng = np.random.default_rng(7)
    ledger = _ledger(ws)
    con = duck.connect(ws.config.catalog)
    accepted: list[dict] = []
    for step in range(3):  # three publishes' worth of ledger rows
        rows = _shop_rows(rng, _entity_table(rng, 25), 1 + 3 * step, f"b{step}")
        ledger.append(rows)
        accepted += rows.to_pylist()
    snapshot = ledger.metadata.current_snapshot_id
    probe = _distinct(pa.concat_tables([_entity_table(rng, 40), _entity_table(rng, 5)]))
    for found in _lookups(con, ledger, snapshot, probe, history=False):
        assert found == _brute(accepted, probe)

    # Compaction's SQL: one row per entity (its highest version), floor = that version, history =
    # every lower version's (version, state), by version.
    kept = _compact(con, ledger, SHOP)
    assert kept == _expected_compaction(accepted)
    ledger = ws.catalog.load_table(ledger.name())
    assert layout.has_history(ledger)
    compacted_rows = ledger.scan().to_arrow().to_pylist()
    snapshot = ledger.metadata.current_snapshot_id
    for found in _lookups(con, ledger, snapshot, probe, history=True):
        assert found == _brute(compacted_rows, probe)  # dropped versions come back as rows
        assert found == _brute(_accepted_with_floors(accepted), probe)

    # More versions after compaction, then a second compaction: histories accumulate.
    rows = _shop_rows(rng, _entity_table(rng, 25), 20, "b9")
    ledger.append(_with_history(rows, ledger))
    accepted += rows.to_pylist()
    ledger = ws.catalog.load_table(ledger.name())
    kept = _compact(con, ledger, SHOP)
    assert kept == _expected_compaction(accepted)

    # The index compaction writes holds exactly the compacted rows (and verify --deep says so).
    ledger = ws.catalog.load_table(ledger.name())
    scan = duck.scan_sql(ledger.metadata_location, ledger.metadata.current_snapshot_id)
    names = layout.ledger_arrow(ledger, SHOP).names
    run = compact._write_index(con, ledger, compact._compacted(scan, names, True, SHOP), SHOP)
    index = key_index.KeyIndex(key_index.folder_of(ledger.location()), key_index.index_schema(SHOP))
    found = _as_found(index.lookup([run], *entity_keys(probe, KEY)))
    assert found == _lookups(con, ledger, ledger.metadata.current_snapshot_id, probe, history=True)[0]
    ledger.append(_with_history(rows.slice(0, 0), ledger),
                  snapshot_properties={key_index.INDEX_PROPERTY: key_index.encode([run])})
    ledger = ws.catalog.load_table(ledger.name())
    assert reports._index_check(con, ledger, ledger.metadata.current_snapshot_id, SHOP) == []
    # A run missing a row is caught.
    table = pa.Table.from_batches(index.batches(run))
    short = key_index.write_run(index.folder, [table.slice(1)], index.schema)
    ledger.append(_with_history(rows.slice(0, 0), ledger),
                  snapshot_properties={key_index.INDEX_PROPERTY: key_index.encode([short])})
    ledger = ws.catalog.load_table(ledger.name())
    problems = reports._index_check(con, ledger, ledger.metadata.current_snapshot_id, SHOP)
    assert len(problems) == 1 and "0 row(s) not in the ledger, 1 ledger row(s) missing" in problems[0]
    con.close()


def _with_history(rows: pa.Table, ledger) -> pa.Table:
    history = layout.history_arrow(SHOP)
    return rows.append_column(history, pa.nulls(rows.num_rows, history.type)).cast(layout.ledger_arrow(ledger, SHOP))


def _compact(con, ledger, contract: Contract) -> list[dict]:
    """Rewrite the ledger with compaction's SQL as ``compact_ledger`` does (schema first), and
    return the compacted rows without keys and batch ids, sorted by key."""
    history = layout.has_history(ledger)
    schema = layout.ledger_arrow(ledger, contract)
    if not history:
        schema = schema.append(layout.history_arrow(contract))
        with ledger.update_schema() as update:
            update.add_column("history", layout.history_iceberg(contract))
    scan = duck.scan_sql(ledger.metadata_location, ledger.metadata.current_snapshot_id)
    sql = compact._compacted(scan, schema.names, history, contract)
    rows = con.execute(sql).to_arrow_table().cast(schema)
    ledger.overwrite(rows)  # pyiceberg's: delete everything, append the compacted rows
    out = [{k: v for k, v in r.items() if k not in ("k1", "k2", "batch_id")} for r in rows.to_pylist()]
    assert rows.column("k1").to_pylist() == [int(k) for k in entity_keys(rows, KEY)[0]]
    return sorted(out, key=lambda r: repr(_key(r)))


def _expected_compaction(accepted: list[dict]) -> list[dict]:
    by_key: dict[tuple, list[dict]] = {}
    for row in accepted:
        by_key.setdefault(_key(row), []).append(row)
    out = []
    for key, rows in by_key.items():
        rows = sorted(rows, key=lambda r: r["seq"])
        top = rows[-1]
        out.append({**{k: top[k] for k in ("shop", "seq", "item", "since", "label", "price", "gone")},
                    "floor": top["seq"],
                    "history": [{"version": r["seq"], "label": r["label"], "price": r["price"], "gone": r["gone"]}
                                for r in rows[:-1]] or None})
    return sorted(out, key=lambda r: repr(_key(r)))


def _accepted_with_floors(accepted: list[dict]) -> list[dict]:
    """The accepted rows as a compacted ledger returns them: the highest version per key with
    its floor, the others without."""
    top: dict[tuple, int] = {}
    for row in accepted:
        top[_key(row)] = max(top.get(_key(row), 0), row["seq"])
    return [{**row, "floor": row["seq"] if row["seq"] == top[_key(row)] else None} for row in accepted]
