"""Small correctness gaps of derived datasets and rebuilds (issue 14 review), one test each.

Driven through the CLI (and the Python API where a race must be staged) on real Iceberg tables
in a SQLite catalog; results read back by DuckDB (``lakepub query``) against the query oracle.
"""

from __future__ import annotations

from pathlib import Path

from test_derive import FIRST, MONTHLY, MRR, _define, _ok, _oracle, _plan, _publish, _rows, shop  # noqa: F401

DOUBLED = {**MONTHLY, "projection": {**MONTHLY["projection"], "query": MONTHLY["projection"]["query"].replace(
    "sum(cents) AS cents", "sum(cents) * 2 AS cents")}}
USER_PROPS = {"comment": "monthly cents, owned by finance", "write.parquet.compression-codec": "snappy",
              "owner.team": "finance"}


def _table(ws_path: Path, name: str):
    from lakepub.store.layout import summary_id
    from lakepub.workspace import Workspace

    with Workspace.open(ws_path) as ws:
        return ws.catalog.load_table(summary_id(ws.config.namespace, name))


def _set_properties(ws_path: Path, name: str, props: dict[str, str]) -> None:
    with _table(ws_path, name).transaction() as tx:  # a user, with pyiceberg
        tx.set_properties(props)


def _catalog_tables(ws_path: Path) -> list[str]:
    from lakepub.workspace import Workspace

    with Workspace.open(ws_path) as ws:
        return sorted(t[-1] for t in ws.catalog.list_tables(ws.config.namespace))


# --- 1. a rebuild swap keeps the published table's user properties --------------------------


def test_a_derived_rebuild_keeps_the_user_properties_of_the_published_table(ws_path: Path, cli):
    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY)
    _ok(cli("reconcile"))
    _set_properties(ws_path, "orders_monthly", USER_PROPS)
    old_definition = _table(ws_path, "orders_monthly").properties["lakepub.definition"]
    _define(ws_path, DOUBLED)
    assert _plan(cli)["orders_monthly"]["rebuild"]
    _ok(cli("reconcile"))
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, DOUBLED)
    props = _table(ws_path, "orders_monthly").properties
    assert {k: props.get(k) for k in USER_PROPS} == USER_PROPS
    assert props["lakepub.definition"] != old_definition and "* 2" in props["lakepub.definition"]
    assert _plan(cli)["orders_monthly"]["pending_partitions"] == 0


def test_a_base_rebuild_keeps_the_user_properties_of_the_published_table(shop: Path, cli):
    _set_properties(shop, "customers_mrr", USER_PROPS)
    old_definition = _table(shop, "customers_mrr").properties["lakepub.definition"]
    _define(shop, {**MRR, "projection": {**MRR["projection"], "group_by": ["country"]}})
    _ok(cli("rebuild", "customers_mrr"))
    props = _table(shop, "customers_mrr").properties
    assert {k: props.get(k) for k in USER_PROPS} == USER_PROPS
    assert props["lakepub.definition"] != old_definition
    assert _rows(cli, "SELECT country, n FROM customers_mrr ORDER BY 1 NULLS LAST") == \
        [{"country": "DE", "n": 1}, {"country": "FR", "n": 1}, {"country": None, "n": 1}]


# --- 2. an upstream that moved just before the swap is a retry, not a refusal ----------------


def test_an_input_that_moved_just_before_the_swap_is_exit_4_and_a_retry_succeeds(ws_path: Path, cli, monkeypatch):
    from lakepub.derive import rebuild
    from test_derive import _order

    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY)
    _ok(cli("reconcile"))
    _define(ws_path, DOUBLED)
    real = rebuild.plan_dataset
    moved = []

    def input_moves_first(ctx, name, batching):  # new input lands between the last window and the swap
        if not moved:
            moved.append(1)
            _publish(cli, ws_path, [_order("Z", 1, "2025-11-20", 77)])
            ctx.forget("orders_daily")
        return real(ctx, name, batching)

    monkeypatch.setattr(rebuild, "plan_dataset", input_moves_first)
    before = _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1")
    res = cli("reconcile")
    assert res.code == 4, (res.code, res.err)
    assert "reconcile' again" in res.err and "Traceback" not in res.err, res.err
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == before  # nothing swapped
    assert any("__rebuild_" in t for t in _catalog_tables(ws_path))  # the rebuild is kept
    monkeypatch.setattr(rebuild, "plan_dataset", real)
    _ok(cli("reconcile"))
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, DOUBLED)
    assert not any("__rebuild_" in t for t in _catalog_tables(ws_path))
