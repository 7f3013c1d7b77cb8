"""Crash at each fault point, then retry: all or nothing, then correct."""

from __future__ import annotations

import pytest

from conftest import A1, A2, B1, B2, ledger_count, published_pointers, set_commit_mode, summary_rows, write_jsonl
from lakepub import reports
from lakepub.faults import POINTS
from lakepub.workspace import Workspace


@pytest.mark.parametrize("mode", ["atomic", "ordered"])
@pytest.mark.parametrize("point", POINTS)
def test_crash_then_retry_ends_correct(ws_path, cli_process, point, mode):
    set_commit_mode(ws_path, mode)
    ws = Workspace.open(ws_path)
    ws.publish("orders_daily", [A1, B1], start={}, end={"p0": 2})
    before_rows = summary_rows(ws)
    before = published_pointers(ws)
    batch = write_jsonl(ws_path / "batch.jsonl", [A2, B2])
    args = ("publish", "orders_daily", "--events", str(batch), "--start", '{"p0":2}', "--end", '{"p0":4}')

    crashed = cli_process(*args, env={"LAKEPUB_FAULT": point})
    assert crashed.code == -9, crashed.err  # killed abruptly at the fault point

    if point == "after-commit":
        # Committed before dying: the whole batch is visible, atomically.
        assert published_pointers(ws) != before
        assert summary_rows(ws) == [("2025-10-02", 150, 1)]
    elif mode == "ordered" and point == "before-pointer-swap":
        # The ledger append landed on its own, but the published snapshot does not name it.
        assert published_pointers(ws)[0] == before[0]
        assert summary_rows(ws) == before_rows
    else:
        # Nothing visible: neither ledger nor summary nor checkpoint moved.
        assert published_pointers(ws) == before
        assert summary_rows(ws) == before_rows

    retry = cli_process(*args)
    assert retry.code == 0, retry.err
    expected_word = "already published" if point == "after-commit" else "published orders_daily"
    assert expected_word in retry.out
    assert summary_rows(ws) == [("2025-10-02", 150, 1)]
    fresh = Workspace.open(ws_path)
    assert fresh.committed_positions("orders_daily") == {"orders": {"p0": 4}}
    assert reports.verify(fresh, "orders_daily", deep=True).ok
    assert ledger_count(fresh) == 4  # the retried batch's ledger rows are there exactly once
    # Exactly one publish of the batch in the history: nothing was double counted.
    log = reports.log(fresh, "orders_daily")
    assert [e.end for e in log] == [{"p0": 4}, {"p0": 2}]
    assert log[0].counts.events in (2, 0) and fresh.query("SELECT sum(orders) FROM orders_daily").column(0)[0].as_py() == 1
