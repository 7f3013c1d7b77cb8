"""A day's total cents must stay an int64: a publish that would leave it is refused (exit 2) with
nothing written, whether the overflow is inside one batch or across publishes."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import published_pointers, summary_rows, write_jsonl
from lakepub.workspace import Workspace

BIG = 2 ** 62
MAX = 2 ** 63 - 1


def _event(order: str, cents: int, day: str = "2025-10-01", version: int = 1) -> dict:
    return {"order_id": order, "version": version, "day": day, "cents": cents, "deleted": False}


def _publish(cli, path: Path, events: list[dict], start: int) -> object:
    write_jsonl(path, events)
    return cli("publish", "orders_daily", "--events", str(path), "--source", "orders",
               "--start", f'{{"p0":{start}}}', "--end", f'{{"p0":{start + len(events)}}}')


@pytest.mark.parametrize("n", [2, 4])
def test_a_batch_whose_day_total_leaves_int64_is_refused(ws: Workspace, cli, tmp_path: Path, n: int):
    """2 x 2^62 wrapped to a negative total (internal inconsistency), 4 x 2^62 to (0, 4) published."""
    assert _publish(cli, tmp_path / "a.jsonl", [_event("keep", 5, "2025-11-01")], 0).code == 0
    before = published_pointers(ws)
    files = _files(ws)
    res = _publish(cli, tmp_path / "b.jsonl", [_event(f"o{i}", BIG) for i in range(n)], 1)
    assert res.code == 2, (res.code, res.out, res.err)
    assert "orders_daily" in res.err and "2025-10-01" in res.err and "int64" in res.err, res.err
    assert len(res.err.strip().splitlines()) == 1 and "Traceback" not in res.err
    assert published_pointers(ws) == before  # nothing published
    assert _files(ws) == files  # nothing written either (no ledger file, no index run)
    assert summary_rows(ws) == [("2025-11-01", 5, 1)]
    assert cli("verify", "orders_daily", "--deep").code == 0


def test_a_total_that_leaves_int64_across_publishes_is_refused(ws: Workspace, cli, tmp_path: Path):
    half = MAX // 2 + 1
    assert _publish(cli, tmp_path / "a.jsonl", [_event("a", half)], 0).code == 0
    before = published_pointers(ws)
    res = _publish(cli, tmp_path / "b.jsonl", [_event("b", half)], 1)
    assert res.code == 2 and "2025-10-01" in res.err and "orders_daily" in res.err, (res.code, res.err)
    assert published_pointers(ws) == before
    # Moving the big order to another day is fine: the retraction and the addition each fit.
    res = _publish(cli, tmp_path / "c.jsonl", [_event("a", half, "2025-10-02", 2), _event("b", half, "2025-10-01")], 1)
    assert res.code == 0, res.err
    assert summary_rows(ws) == [("2025-10-01", half, 1), ("2025-10-02", half, 1)]
    assert cli("verify", "orders_daily", "--deep").code == 0


def test_the_largest_total_that_fits_is_published(ws: Workspace, cli, tmp_path: Path):
    """Deltas that wrap inside a batch but end in range are exact (retract and add on one day)."""
    assert _publish(cli, tmp_path / "a.jsonl", [_event("a", MAX - 10), _event("b", 10)], 0).code == 0
    res = _publish(cli, tmp_path / "b.jsonl", [_event("a", MAX - 10, version=2), _event("b", 10, version=2)], 2)
    assert res.code == 0, res.err
    assert summary_rows(ws) == [("2025-10-01", MAX, 2)]
    assert cli("verify", "orders_daily", "--deep").code == 0


def _files(ws: Workspace) -> set[Path]:
    return {p for p in Path(ws.config.root).rglob("*") if p.is_file() and "landing" not in p.parts}
