"""Review of h-derive (issue 14, session 9): a rebuild crashed after its windows (before the
swap) resumes with an upstream republished in between, in the same process (the remembered
fingerprints live in the process), with and without workers; the result reads back as the oracle."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_derive import FIRST, MONTHLY, _define, _ok, _oracle, _order, _plan, _publish, _rows
from test_derive_fixes import DOUBLED, _catalog_tables


@pytest.mark.parametrize("workers", [1, 2])
def test_rebuild_crashed_before_its_swap_resumes_after_an_upstream_moved(ws_path: Path, cli, monkeypatch, workers):
    from lakepub.derive import rebuild
    from lakepub.derive.reconcile import reconcile
    from lakepub.derive.state import Batching
    from lakepub.workspace import Workspace

    _publish(cli, ws_path, FIRST)
    _define(ws_path, MONTHLY)
    _ok(cli("reconcile"))
    _define(ws_path, DOUBLED)

    class Crash(Exception):
        pass

    def crash(*args, **kwargs):
        raise Crash()

    with monkeypatch.context() as m:
        m.setattr(rebuild, "finish", crash)
        with Workspace.open(ws_path) as ws, pytest.raises(Crash):
            reconcile(ws, ["orders_monthly"], batching=Batching(partitions=1), workers=workers)
    plan = _plan(cli)["orders_monthly"]
    assert plan["rebuild"] and plan["pending_partitions"] == 0
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, MONTHLY)  # not swapped yet
    # the upstream moves: October changes, a new month appears, the September order is deleted
    _publish(cli, ws_path, [_order("B", 2, "2025-10-01", 71), _order("F", 1, "2026-01-05", 3),
                            _order("A", 2, "2025-09-03", 100, deleted=True)])
    assert _plan(cli)["orders_monthly"]["pending_partitions"] >= 2
    with Workspace.open(ws_path) as ws:
        reconcile(ws, ["orders_monthly"], batching=Batching(partitions=1), workers=workers)
    assert not any("__rebuild_" in t for t in _catalog_tables(ws_path))
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, DOUBLED)
    assert _plan(cli)["orders_monthly"]["pending_partitions"] == 0
    # and again after a republish in place, then a backfill of everything
    _publish(cli, ws_path, [_order("C", 2, "2025-10-20", 6)])
    _ok(cli("reconcile", "--workers", str(workers)))
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, DOUBLED)
    _ok(cli("backfill", "orders_monthly", "--from", "2024-12", "--to", "2026-01"))
    assert _rows(cli, "SELECT * FROM orders_monthly ORDER BY 1") == _oracle(cli, DOUBLED)
    assert _plan(cli)["orders_monthly"]["pending_partitions"] == 0
