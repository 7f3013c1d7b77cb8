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

    def input_moves_first(ctx, name, batching, **options):  # new input lands between the last window and the swap
        if not moved:
            moved.append(1)
            _publish(cli, ws_path, [_order("Z", 1, "2025-11-20", 77)])
            ctx.forget("orders_daily")
        return real(ctx, name, batching, **options)

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


# --- 3. a rebuild abandoned by a definition change is reported, then dropped -----------------


def _crash_mid_rebuild(ws_path: Path) -> None:
    """Reconcile a new data version of orders_monthly offline; crash after its first window."""
    import pytest

    from lakepub.derive.reconcile import reconcile
    from lakepub.derive.state import Batching
    from lakepub.workspace import Workspace
    from test_derive import _Crash

    def crash(result) -> None:
        raise _Crash()

    with Workspace.open(ws_path) as ws, pytest.raises(_Crash):
        reconcile(ws, ["orders_monthly"], batching=Batching(partitions=1), on_window=crash)


def test_an_abandoned_rebuild_is_planned_then_dropped_and_swept(ws_path: Path, cli):
    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY)
    _ok(cli("reconcile"))
    published = _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1")
    _define(ws_path, DOUBLED)
    _crash_mid_rebuild(ws_path)
    building = _plan(cli)["orders_monthly"]
    assert building["rebuild"] and building["abandoned_rebuilds"] == []  # the build of the desired version
    assert building["rebuild"] in _catalog_tables(ws_path)
    folder = Path(_table(ws_path, building["rebuild"]).location().removeprefix("file://"))
    assert folder.exists()
    _define(ws_path, MONTHLY)  # reverted mid-rebuild: that build is of neither version now
    plan = _plan(cli)["orders_monthly"]
    assert plan["change"] == "untouched" and plan["rebuild"] is None
    assert plan["abandoned_rebuilds"] == [building["rebuild"]]
    text = _ok(cli("plan", "orders_monthly")).out
    assert f"abandoned rebuild table {building['rebuild']}" in text and "reconcile orders_monthly" in text
    res = _ok(cli("reconcile"))
    assert building["rebuild"] in res.err and "abandoned" in res.err
    assert not any("__rebuild_" in t for t in _catalog_tables(ws_path))
    assert _plan(cli)["orders_monthly"]["abandoned_rebuilds"] == []
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == published == _oracle(cli, MONTHLY)
    report = _ok(cli("janitor", "--older-than", "0s", "--format", "json")).json()
    assert {Path(f["folder"].removeprefix("file://")).name: f["status"] for f in report["superseded_folders"]} \
        == {folder.name: "deleted"}
    assert not folder.exists()
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == published


def test_a_rebuild_abandoned_for_a_third_version_is_dropped_and_the_third_swapped_in(ws_path: Path, cli):
    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY)
    _ok(cli("reconcile"))
    _define(ws_path, DOUBLED)
    _crash_mid_rebuild(ws_path)
    abandoned = _plan(cli)["orders_monthly"]["rebuild"]
    tripled = {**MONTHLY, "projection": {**MONTHLY["projection"], "query": MONTHLY["projection"]["query"].replace(
        "sum(cents) AS cents", "sum(cents) * 3 AS cents")}}
    _define(ws_path, tripled)
    plan = _plan(cli)["orders_monthly"]
    assert plan["rebuild"] != abandoned and plan["abandoned_rebuilds"] == [abandoned]
    _ok(cli("reconcile"))
    assert not any("__rebuild_" in t for t in _catalog_tables(ws_path))
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, tripled)


# --- 4. lookback means the newest non-null partitions ----------------------------------------


def test_lookback_skips_the_null_partition(shop: Path, cli):
    from test_derive import PER_COUNTRY

    _define(shop, {**PER_COUNTRY, "lookback": 1})
    _ok(cli("reconcile"))
    query = f"SELECT * FROM ({PER_COUNTRY['projection']['query']}) ORDER BY 1 NULLS LAST"
    assert _rows(cli, "SELECT * FROM plans_per_country ORDER BY 1 NULLS LAST") == _rows(cli, query)
    assert any(r["country"] is None for r in _rows(cli, query))  # a null partition exists
    plan = _plan(cli)["plans_per_country"]
    assert [w["why"] for w in plan["windows"]] == [{"FR": "lookback"}], plan["windows"]


def test_an_abandoned_base_rebuild_is_planned_then_dropped_by_rebuild(shop: Path, cli, monkeypatch):
    import pytest

    from lakepub.derive.rebuild_base import rebuild_base
    from lakepub.store import commit
    from lakepub.workspace import Workspace
    from test_derive import _Crash

    def crash(*args, **kw):
        raise _Crash()

    _define(shop, {**MRR, "projection": {**MRR["projection"], "group_by": ["country"]}})
    monkeypatch.setattr(commit, "swap_table", crash)
    with Workspace.open(shop) as ws, pytest.raises(_Crash):  # the process dies before its swap
        rebuild_base(ws, "customers_mrr")
    monkeypatch.undo()
    left = [t for t in _catalog_tables(shop) if "__rebuild_" in t]
    assert len(left) == 1 and _plan(cli)["customers_mrr"]["abandoned_rebuilds"] == []  # resumable: kept
    _define(shop, MRR)  # reverted
    assert _plan(cli)["customers_mrr"]["abandoned_rebuilds"] == left
    assert "'lakepub rebuild customers_mrr' drops it" in _ok(cli("plan", "customers_mrr")).out
    res = _ok(cli("rebuild", "customers_mrr"))
    assert "nothing to rebuild" in res.out and left[0] in res.err, res.err
    assert not any("__rebuild_" in t for t in _catalog_tables(shop))
    assert _plan(cli)["customers_mrr"]["abandoned_rebuilds"] == []
