"""lakepub on a PostgreSQL SQL catalog: the seed example, refusals, and two concurrent writers."""

from __future__ import annotations

import threading
from datetime import date

import pytest

from conftest import A1, A2, B1, SEED_EVENTS, published_pointers, summary_rows
from lakepub.errors import PayloadConflict, StaleStart
from lakepub.generate import oracle_summary
from lakepub.store.layout import summary_id
from lakepub.store.record import latest_record
from lakepub.workspace import Workspace

pytestmark = pytest.mark.integration

DATASET = "orders_daily"


@pytest.fixture
def pg_ws(pg_url, make_workspace) -> Workspace:
    root = make_workspace({"name": "lakepub", "type": "sql", "uri": pg_url, "warehouse": ".lakepub/warehouse"})
    ws = Workspace.open(root)
    assert ws.config.catalog["uri"].startswith("postgresql+psycopg2://")
    return ws


def test_seed_example_event_by_event(pg_ws: Workspace):
    expected_after = [
        [("2025-10-01", 100, 1)],  # A/v1
        [("2025-10-02", 150, 1)],  # A/v2 moved to 10-02
        [("2025-10-02", 150, 1)],  # B/v2 delete: a tombstone, nothing live
        [("2025-10-02", 150, 1)],  # late B/v1: below the tombstone, ignored
    ]
    for offset, (event, expected) in enumerate(zip(SEED_EVENTS, expected_after)):
        result = pg_ws.publish(DATASET, [event], start={"p0": offset}, end={"p0": offset + 1})
        assert result.status == "published"
        assert summary_rows(pg_ws) == expected, event
    assert pg_ws.query(f"SELECT day::VARCHAR AS day, cents, orders FROM {DATASET}").to_pylist() == [
        {"day": "2025-10-02", "cents": 150, "orders": 1}
    ]
    assert pg_ws.committed_positions(DATASET) == {"orders": {"p0": 4}}
    # Replaying the last batch is recognised as already published.
    again = pg_ws.publish(DATASET, [B1], start={"p0": 3}, end={"p0": 4})
    assert again.status == "already-published"


def test_payload_conflict_and_stale_start_leave_the_state_unchanged(pg_ws: Workspace):
    pg_ws.publish(DATASET, SEED_EVENTS, start={"p0": 0}, end={"p0": 4})
    before = published_pointers(pg_ws)
    rows = summary_rows(pg_ws)
    assert rows == [("2025-10-02", 150, 1)]

    changed = {**A2, "cents": 999}
    with pytest.raises(PayloadConflict) as conflict:
        pg_ws.publish(DATASET, [changed], start={"p0": 4}, end={"p0": 5})
    assert conflict.value.exit_code == 3 and "\n" not in conflict.value.one_line()
    assert published_pointers(pg_ws) == before
    assert summary_rows(pg_ws) == rows

    other = {**A1, "order_id": "C"}
    with pytest.raises(StaleStart) as stale:
        pg_ws.publish(DATASET, [other], start={"p0": 2}, end={"p0": 3})
    assert stale.value.exit_code == 3
    assert stale.value.committed == {"p0": 4}
    assert published_pointers(pg_ws) == before
    assert summary_rows(pg_ws) == rows
    assert pg_ws.committed_positions(DATASET) == {"orders": {"p0": 4}}


def _source_batches(prefix: str, n_batches: int = 5, per_batch: int = 6) -> list[list[dict]]:
    """Batches of one source over its own orders: new orders, day moves, deletes and late versions.

    Every source writes into the same two months so that concurrent publishes rewrite the same
    partitions and really race.
    """
    batches = []
    for b in range(n_batches):
        batch = []
        for i in range(per_batch):
            oid = f"{prefix}-{b}-{i}"
            day = date(2025, 10 + (i % 2), 1 + (b * per_batch + i) % 28).isoformat()
            batch.append({"order_id": oid, "version": 1, "day": day, "cents": 10 * (i + 1), "deleted": False})
        if b > 0:  # touch orders of the previous batch: a move, a delete, and a late stale version
            prev = f"{prefix}-{b - 1}"
            batch.append({"order_id": f"{prev}-0", "version": 2, "day": "2025-11-15", "cents": 5, "deleted": False})
            batch.append({"order_id": f"{prev}-1", "version": 3, "day": None, "cents": None, "deleted": True})
            batch.append({"order_id": f"{prev}-1", "version": 2, "day": "2025-10-20", "cents": 7, "deleted": False})
        batches.append(batch)
    return batches


def test_two_concurrent_writers_with_different_sources(pg_ws: Workspace):
    root = pg_ws.config.root
    plan = {"s1": _source_batches("s1"), "s2": _source_batches("s2")}
    handles = {source: Workspace.open(root) for source in plan}  # two Workspaces, two catalogs/engines
    assert handles["s1"].catalog is not handles["s2"].catalog
    for ws in handles.values():  # create the tables up front: table creation is not what is raced here
        ws.publisher(DATASET)

    barrier = threading.Barrier(len(plan))
    results: dict[str, list] = {source: [] for source in plan}
    errors: list[BaseException] = []

    def writer(source: str) -> None:
        try:
            ws = handles[source]
            barrier.wait(timeout=30)
            offset = 0
            for batch in plan[source]:
                result = ws.publish(DATASET, batch, source=source,
                                    start={"p0": offset}, end={"p0": offset + len(batch)})
                results[source].append(result)
                offset += len(batch)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(source,), name=f"writer-{source}") for source in plan]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a writer hung"
    assert not errors, errors

    assert all(r.status == "published" for rs in results.values() for r in rs)
    all_events = [e for batches in plan.values() for batch in batches for e in batch]
    oracle = sorted((d.isoformat(), cents, orders) for d, (cents, orders) in oracle_summary(all_events).items())
    assert summary_rows(pg_ws) == oracle

    fresh = Workspace.open(root)
    record = latest_record(fresh.catalog.load_table(summary_id(fresh.config.namespace, DATASET)))
    assert record is not None
    expected_positions = {source: {"p0": sum(len(b) for b in batches)} for source, batches in plan.items()}
    assert record.positions == expected_positions
    assert fresh.committed_positions(DATASET) == expected_positions
    # How often a writer lost the race and retried (informational; depends on timing).
    retries = sum(r.attempts - 1 for rs in results.values() for r in rs)
    print(f"concurrent writers: {retries} retried attempt(s) over {sum(map(len, results.values()))} publishes")


def test_writers_started_together_on_an_empty_database(pg_url, make_workspace, tmp_path):
    """Four publishers released at once on an empty database race to create pyiceberg's catalog
    tables, the namespace and the dataset's tables: all succeed and every event counts once."""
    from conftest import publish_together
    from test_concurrency import writer_batches

    root = make_workspace({"name": "lakepub", "type": "sql", "uri": pg_url, "warehouse": ".lakepub/warehouse"})
    plan = {f"s{w}": writer_batches(w, 2, 10) for w in range(4)}
    results = publish_together(root, plan, tmp_path)
    assert [r.code for r in results] == [0] * 4, [r.err for r in results]
    ws = Workspace.open(root)
    got = {r["day"]: (r["cents"], r["orders"]) for r in ws.query(f"SELECT * FROM {DATASET}").to_pylist()}
    assert got == oracle_summary([e for batches in plan.values() for batch in batches for e in batch])
    assert ws.committed_positions(DATASET) == {s: {"p0": 20} for s in plan}


def test_a_lock_error_at_commit_on_postgresql_is_an_unknown_outcome(pg_ws: Workspace, monkeypatch):
    """SQLite's "database is locked" at COMMIT is a conflict (nothing applied, retry); on
    PostgreSQL a failure of COMMIT itself, a lock error included, may have landed: exit 5."""
    from sqlalchemy.exc import OperationalError

    from lakepub.errors import OutcomeUnknown
    from lakepub.store import commit

    class LockedAtCommit(commit.Session):
        def commit(self):
            raise OperationalError("COMMIT", {}, Exception("canceling statement due to lock timeout: relation locked"))

    pg_ws.publish(DATASET, [A1], start={}, end={"p0": 1})
    monkeypatch.setattr(commit, "Session", LockedAtCommit)
    with pytest.raises(OutcomeUnknown):
        pg_ws.publish(DATASET, [A2], start={"p0": 1}, end={"p0": 2})
