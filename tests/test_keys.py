"""Order keys (lakepub.keys): stable forever for stored ledgers, distinct for distinct ids, and
the lookup of a ledger created before them still works by order_id."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import A1, A2, B1, B2, summary_rows
from lakepub.keys import order_keys
from lakepub.maintenance.compact import compact_ledger
from lakepub.store.layout import LEDGER_SCHEMA, has_order_keys, ledger_id
from lakepub.workspace import Workspace

GOLDEN = ["", "a", "a\x00", "o000000000001", "order-with-a-longer-id-0042"]


def test_order_keys_never_change():
    """Ledgers store these keys: a change of the function would make lookups miss stored rows."""
    k1, k2 = order_keys(pa.array(GOLDEN))
    assert list(map(int, k1)) == [-7046029254386353131, 7075883509774426401, 5718913436695043505,
                                  -199795993605439989, 7452549451470683614]
    assert list(map(int, k2)) == [-4417276706812531889, -3742030766074404754, -1048510931955997874,
                                  -3996246018768516590, 5049853994296809469]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=60))
def test_order_keys_are_per_string_and_independent_of_the_array(ids):
    k1, k2 = order_keys(pa.array(ids, pa.string()))
    for i, value in enumerate(ids):  # the same id gets the same key alone, sliced or chunked
        one = order_keys(pa.array([value], pa.string()))
        assert (one[0][0], one[1][0]) == (k1[i], k2[i])
    assert len(set(zip(k1.tolist(), k2.tolist()))) == len(set(ids))
    if len(ids) > 2:
        chunked = pa.chunked_array([pa.array(ids[:2], pa.string()), pa.array(ids[2:], pa.string())])
        assert order_keys(chunked)[0].tolist() == k1.tolist()
        sliced = pa.array(ids, pa.string()).slice(1)
        assert order_keys(sliced)[1].tolist() == k2.tolist()[1:]


def test_a_ledger_created_without_order_keys_is_looked_up_by_order_id(ws: Workspace):
    legacy = LEDGER_SCHEMA.select("order_id", "version", "day", "cents", "deleted", "batch_id", "floor")
    ws.catalog.create_namespace("lakepub")
    ws.catalog.create_table(ledger_id("lakepub", "orders_daily"), schema=legacy)
    for i, event in enumerate([A1, A2, B2, B1]):  # the seed's order example, an event per publish
        ws.publish("orders_daily", [event], start={"p0": i}, end={"p0": i + 1})
    ledger = ws.catalog.load_table(ledger_id("lakepub", "orders_daily"))
    assert not has_order_keys(ledger) and "k1" not in ledger.schema().column_names
    assert summary_rows(ws) == [("2025-10-02", 150, 1)]
    assert ws.verify("orders_daily", deep=True).ok
    compact_ledger(ws, "orders_daily")  # compaction keeps the legacy schema
    ws.publish("orders_daily", [A1, B1], start={"p0": 4}, end={"p0": 6})  # old versions: still ignored
    assert summary_rows(ws) == [("2025-10-02", 150, 1)]
    assert ws.verify("orders_daily", deep=True).ok


def test_a_long_id_among_short_ones_gets_its_own_keys():
    """The variable-width path folds each id over its own words (work follows the bytes)."""
    ids = ["o1", "x" * 20_000 + "é", "o22", ""]
    k1, k2 = order_keys(pa.array(ids))
    for i, value in enumerate(ids):
        one = order_keys(pa.array([value]))
        assert (one[0][0], one[1][0]) == (k1[i], k2[i])
