"""Sensors and retirement of derived datasets: what a scheduler chains on (issue 14).

``lakepub state`` / ``wait`` / ``retire`` / ``restore`` work on a derived dataset as on a base one:
its state carries the data version its windows recorded and the per-partition checksums; ``wait``
releases once a partition is published at the expected data version; a retired derived dataset
is hidden from queries and skipped by ``reconcile`` (refused when named), and ``restore`` lets the
next reconcile catch up, ending equal to the oracle (its SQL run by DuckDB on the upstream).
"""

from __future__ import annotations

from pathlib import Path

from test_derive import FIRST, MONTHLY, _define, _oracle, _order, _plan, _publish, _rows, _snapshots


def test_state_wait_retire_restore_of_a_derived_dataset(ws_path: Path, cli):
    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY)
    assert cli("state", "orders_monthly", "--format", "json").json()["readiness"] == "never-published"
    assert cli("reconcile").code == 0
    version = _plan(cli)["orders_monthly"]["current_version"]
    state = cli("state", "orders_monthly", "--format", "json").json()
    assert state["readiness"] == "published" and state["data_version"] == version
    assert {p["partition"] for p in state["partitions"]} == {"2024-12", "2025-09", "2025-10", "2025-11"}
    assert {p["data_version"] for p in state["partitions"]} == {version}

    ok = cli("wait", "orders_monthly", "--partition", "2025-10", "--data-version", version, "--timeout", "5s")
    assert ok.code == 0, ok.err
    late = cli("wait", "orders_monthly", "--partition", "2026-01", "--timeout", "1s", "--interval", "1s")
    assert late.code == 6, late.err
    assert cli("wait", "orders_monthly", "--partition", "2026-01-01", "--timeout", "1s").code == 2  # not a month label

    assert cli("retire", "orders_monthly").code == 0
    res = cli("query", "SELECT * FROM orders_monthly")
    assert res.code == 2 and "retired" in res.err
    _publish(cli, ws_path, [_order("G", 1, "2026-01-01", 3)])
    before = {s["snapshot_id"] for s in _snapshots(ws_path, "orders_monthly")}
    assert cli("reconcile").code == 0  # skipped, like run skips a retired base dataset
    assert {s["snapshot_id"] for s in _snapshots(ws_path, "orders_monthly")} == before
    named = cli("reconcile", "orders_monthly")
    assert named.code == 3 and "restore" in named.err

    assert cli("restore", "orders_monthly").code == 0
    assert cli("reconcile").code == 0
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, MONTHLY)
    assert cli("wait", "orders_monthly", "--partition", "2026-01", "--data-version", version[:15],
               "--timeout", "5s").code == 0


def test_a_query_error_names_the_dataset_the_query_named(ws_path: Path, cli):
    """DuckDB's "table does not exist" message is matched by whole names: a retired
    ``orders_m`` is not blamed for a query of the not yet computed ``orders_monthly``."""
    _publish(cli, ws_path, FIRST)
    _define(ws_path, {**MONTHLY, "name": "orders_m"})
    assert cli("reconcile").code == 0
    assert cli("retire", "orders_m").code == 0
    _define(ws_path, MONTHLY)
    res = cli("query", "SELECT * FROM orders_monthly")
    assert res.code == 2 and "'orders_monthly' has not been computed yet" in res.err, res.err
    res = cli("query", "SELECT * FROM orders_m")
    assert res.code == 2 and "'orders_m' is retired" in res.err, res.err
