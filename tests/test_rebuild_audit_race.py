"""Issue 14: the offline rebuild swaps in exactly the snapshot it audited.

A foreign commit to the rebuild table between its audit and the swap (a concurrent
``lakepub reconcile --window`` of the same rebuild, a resumed rebuild in another process) must
not be published unaudited: the rebuild refuses (retry family, exit 4; the next run re-audits).
Driven through the CLI (in-process; the race is staged by wrapping ``rebuild.audit``) on real Iceberg
tables in a SQLite catalog, read back by DuckDB (``lakepub query``) against the query oracle.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from test_derive import FIRST, MONTHLY, _define, _ok, _oracle, _publish, _rows  # noqa: F401
from test_readers import _outside_duckdb
from test_derive_fixes import DOUBLED, USER_PROPS, _set_properties, _table


def _rebuild_with_foreign_commit(ws_path: Path, cli, monkeypatch, carry: bool):
    """``lakepub reconcile`` of DOUBLED; right after the audit another writer appends a bogus row to
    the rebuild table. Returns (the CLI result, the rebuild table's audited snapshot id)."""
    import pyarrow as pa

    from lakepub.derive import rebuild
    from lakepub.store.layout import summary_id
    from lakepub.workspace import Workspace

    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY)
    _ok(cli("reconcile"))
    if carry:  # carry_properties commits (else the swap alone must notice)
        _set_properties(ws_path, "orders_monthly", USER_PROPS)
    _define(ws_path, DOUBLED)
    real_audit = rebuild.audit
    audited: list[int | None] = []

    def audit_then_foreign_commit(ctx, name, into):
        rows = real_audit(ctx, name, into)
        audited.append(ctx.table(into).metadata.current_snapshot_id)
        with Workspace.open(ws_path) as other:  # another process commits a window meanwhile
            table = other.catalog.load_table(summary_id(other.config.namespace, into))
            bogus = pa.Table.from_pylist([{"month": "2030-01-01", "cents": 666, "orders": 1}])
            bogus = bogus.cast(table.schema().as_arrow())
            table.append(bogus)
        return rows

    monkeypatch.setattr(rebuild, "audit", audit_then_foreign_commit)
    res = cli("reconcile")
    monkeypatch.setattr(rebuild, "audit", real_audit)
    return res, audited[0] if audited else None


@pytest.mark.parametrize("carry", [True, False], ids=["with-property-commit", "swap-only"])
def test_a_commit_between_audit_and_swap_is_never_published(ws_path: Path, cli, monkeypatch, carry: bool):
    res, audited = _rebuild_with_foreign_commit(ws_path, cli, monkeypatch, carry)
    assert audited is not None
    published = _table(ws_path, "orders_monthly")
    rows = _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1")
    assert all(r["cents"] != 666 for r in rows), rows  # the unaudited row was never published
    # the foreign window certainly landed after the audit: the rebuild refuses (retry family, exit 4)
    assert res.code == 4, res.err + res.out
    assert "run 'lakepub reconcile' again" in res.err and "Traceback" not in res.err, res.err
    assert rows == _oracle(cli, MONTHLY)  # the old version is still the published one
    assert published.metadata.current_snapshot_id != audited
    # the next run re-audits the rebuild: the foreign row fails it, nothing is published
    res = cli("reconcile")
    assert res.code != 0, res.out
    assert "audit" in res.err, res.err  # re-audited: the foreign row is one no window recorded
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, MONTHLY)


@pytest.mark.parametrize("carry", [True, False], ids=["with-property-commit", "last-window-commit"])
def test_the_last_commit_before_the_swap_writes_the_version_hint(ws_path: Path, cli, carry: bool):
    from lakepub.store.version_hint import read_version_hint

    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY)
    _ok(cli("reconcile"))
    if carry:
        _set_properties(ws_path, "orders_monthly", USER_PROPS)
    _define(ws_path, DOUBLED)
    _ok(cli("reconcile"))
    table = _table(ws_path, "orders_monthly")
    assert ({k: table.properties.get(k) for k in USER_PROPS} == USER_PROPS) == carry
    assert read_version_hint(table.io, table.metadata.location) == table.metadata_location
    con = _outside_duckdb(guessing=False)  # a reader of the table folder follows the hint
    folder = table.metadata.location.removeprefix("file://")
    got = sorted(con.execute(f"SELECT month, cents, orders FROM iceberg_scan('{folder}')").fetchall())
    assert [r[1] for r in got] == [r["cents"] for r in _oracle(cli, DOUBLED)]
