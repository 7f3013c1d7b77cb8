"""Many writers on one dataset: rebase on lost races, one winner per position, whole-snapshot reads.

Runs on the SQLite catalog, and on PostgreSQL (marked ``integration``) when a server answers.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from datetime import date

from lakepub.store.layout import LEDGER_ARROW, SUMMARY_ARROW

from lakepub.generate import oracle_summary
from lakepub.store.commit import CommitConflict, TableChange, commit_atomically
from lakepub.store.record import latest_record
from lakepub.store import key_index
from lakepub.workspace import Workspace

DAYS = ["2025-01-30", "2025-01-31", "2025-02-01", "2025-02-02", "2025-03-03"]


def payload(order: str, version: int) -> dict:
    """One payload per (order, version), so writers never conflict by accident."""
    h = random.Random(f"{order}/{version}").randrange(1 << 30)
    deleted = h % 7 == 0
    return {"order_id": order, "version": version, "day": DAYS[h % len(DAYS)], "cents": h % 1000, "deleted": deleted}


def writer_batches(writer: int, batches: int, size: int) -> list[list[dict]]:
    rng = random.Random(writer)
    # Half the orders are the writer's own (commuting batches), half shared (recompute on races).
    out = []
    for _ in range(batches):
        orders = [f"w{writer}-{rng.randrange(30)}" if rng.random() < 0.5 else f"shared-{rng.randrange(30)}"
                  for _ in range(size)]
        out.append([payload(o, rng.randrange(1, 6)) for o in orders])
    return out


WORKER = textwrap.dedent("""
    import json, sys
    from lakepub.workspace import Workspace
    root, source, path = sys.argv[1], sys.argv[2], sys.argv[3]
    ws = Workspace.open(root)
    offset = 0
    for batch in json.load(open(path)):
        ws.publish("orders_daily", batch, source=source, start={"p0": offset}, end={"p0": offset + len(batch)})
        offset += len(batch)
    print(json.dumps({"rebases": ws.publisher("orders_daily").rebases}))
""")


def test_four_processes_of_different_sources_count_every_event_once(backend_ws: Workspace, tmp_path: Path):
    writers, batches, size = 4, 8, 20
    plan = {w: writer_batches(w, batches, size) for w in range(writers)}
    backend_ws.publisher("orders_daily")  # create the tables once, before the race
    procs = []
    for w, batch_list in plan.items():
        path = tmp_path / f"w{w}.json"
        path.write_text(json.dumps(batch_list))
        procs.append(subprocess.Popen([sys.executable, "-c", WORKER, str(backend_ws.config.root), f"s{w}", str(path)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    print("commit races lost and rebased:", [json.loads(out)["rebases"] for out, _ in outs])
    all_events = [e for batch_list in plan.values() for batch in batch_list for e in batch]
    ws = Workspace.open(backend_ws.config.root)
    got = {r["day"]: (r["cents"], r["orders"]) for r in ws.query("SELECT * FROM orders_daily").to_pylist()}
    assert got == oracle_summary(all_events)
    record = latest_record(ws.catalog.load_table(("lakepub", "orders_daily")))
    assert record.positions == {f"s{w}": {"p0": batches * size} for w in range(writers)}
    assert record.totals.events == writers * batches * size  # every event counted exactly once
    assert ws.verify("orders_daily", deep=True).ok  # incl. the key index after rebased commits
    if backend_ws.config.key_index:  # every published ledger snapshot kept a complete index
        ledger = ws.catalog.load_table(("lakepub", "orders_daily__ledger"))
        assert key_index.runs_of(ledger.snapshot_by_id(record.ledger_snapshot)) is not None


def test_racing_on_the_same_position_has_one_winner(backend_ws: Workspace, tmp_path: Path):
    backend_ws.publish("orders_daily", [payload("a", 1)], start={}, end={"p0": 1})
    procs = []
    for i in range(3):
        path = tmp_path / f"b{i}.jsonl"
        path.write_text(json.dumps(payload(f"racer{i}", 1)) + "\n")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "lakepub.cli", "-w", str(backend_ws.config.root), "publish", "orders_daily",
             "--events", str(path), "--start", '{"p0": 1}', "--end", '{"p0": 2}'],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 3, 3], results
    for code, err in results:
        if code == 3:
            assert 'committed position is {"p0": 2}' in err
    ws = Workspace.open(backend_ws.config.root)
    assert ws.committed_positions("orders_daily") == {"orders": {"p0": 2}}


def test_readers_see_whole_snapshots_only(backend_ws: Workspace):
    orders = [f"m{i}" for i in range(20)]
    first = [{"order_id": o, "version": 1, "day": DAYS[0], "cents": 10, "deleted": False} for o in orders]
    backend_ws.publish("orders_daily", first, start={}, end={"p0": 20})
    stop = threading.Event()
    reads: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def reader() -> None:
        ws = Workspace.open(backend_ws.config.root)
        try:
            while not stop.is_set():
                row = ws.query("SELECT sum(cents)::BIGINT AS c, sum(orders)::BIGINT AS o FROM orders_daily")
                reads.append((row["c"][0].as_py(), row["o"][0].as_py()))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        offset = 20
        for version in range(2, 12):  # move every order to another day (across partitions), totals constant
            batch = [{"order_id": o, "version": version, "day": DAYS[(version + i) % len(DAYS)], "cents": 10,
                      "deleted": False} for i, o in enumerate(orders)]
            backend_ws.publish("orders_daily", batch, start={"p0": offset}, end={"p0": offset + 20})
            offset += 20
    finally:
        time.sleep(0.2)
        stop.set()
        thread.join(timeout=60)
    assert not errors, errors
    assert len(reads) >= 5
    assert set(reads) == {(200, 20)}


def test_two_handles_on_one_table_only_one_commit_lands(ws: Workspace):
    ws.publish("orders_daily", [payload("x", 1)], start={}, end={"p0": 1})
    one, two = Workspace.open(ws.config.root), Workspace.open(ws.config.root)
    t1 = one.catalog.load_table(("lakepub", "orders_daily"))
    t2 = two.catalog.load_table(("lakepub", "orders_daily"))
    tx1, tx2 = t1.transaction(), t2.transaction()
    row = lambda cents: pa.Table.from_pylist([{"day": date(2025, 1, 1), "cents": cents, "orders": 1}],  # noqa: E731
                                            schema=SUMMARY_ARROW)
    tx1.append(row(1))
    tx2.append(row(2))  # both expect the same parent snapshot
    commit_atomically(one.catalog, [TableChange(t1, tx1)])
    with pytest.raises(CommitConflict):
        commit_atomically(two.catalog, [TableChange(t2, tx2)])
    cents = ws.catalog.load_table(("lakepub", "orders_daily")).scan().to_arrow().column("cents").to_pylist()
    assert 1 in cents and 2 not in cents


def _ledger_row(order: str) -> pa.Table:
    return pa.Table.from_pylist([{**payload(order, 1), "day": date(2025, 1, 1), "batch_id": "other"}], schema=LEDGER_ARROW)


def test_multi_table_commit_is_all_or_nothing(ws: Workspace):
    ws.publish("orders_daily", [payload("x", 1)], start={}, end={"p0": 1})
    summary = ws.catalog.load_table(("lakepub", "orders_daily"))
    ledger = ws.catalog.load_table(("lakepub", "orders_daily__ledger"))
    tx = summary.transaction()
    tx.append(SUMMARY_ARROW.empty_table())
    # Another writer appends to the ledger after we read it: the summary change must not land either.
    Workspace.open(ws.config.root).catalog.load_table(("lakepub", "orders_daily__ledger")).append(_ledger_row("y"))
    with pytest.raises(CommitConflict):
        commit_atomically(ws.catalog, [TableChange(ledger), TableChange(summary, tx)])
    assert ws.catalog.load_table(("lakepub", "orders_daily")).current_snapshot().snapshot_id == \
        summary.current_snapshot().snapshot_id


def test_race_lost_between_staging_and_pointer_swap(ws: Workspace, monkeypatch):
    """The compare-and-set catches a writer that commits after our requirements were validated."""
    import lakepub.store.commit as commit_module

    ws.publish("orders_daily", [payload("x", 1)], start={}, end={"p0": 1})
    summary = ws.catalog.load_table(("lakepub", "orders_daily"))
    ledger = ws.catalog.load_table(("lakepub", "orders_daily__ledger"))
    stx, ltx = summary.transaction(), ledger.transaction()
    stx.append(SUMMARY_ARROW.empty_table())
    ltx.append(_ledger_row("mine"))

    def sneak_in(name: str) -> None:
        if name == "before-pointer-swap":
            Workspace.open(ws.config.root).catalog.load_table(("lakepub", "orders_daily")).append(
                SUMMARY_ARROW.empty_table())

    monkeypatch.setattr(commit_module, "fault_point", sneak_in)
    with pytest.raises(CommitConflict):
        commit_atomically(ws.catalog, [TableChange(ledger, ltx), TableChange(summary, stx)])
    # The ledger's pointer did not move although its own compare-and-set would have succeeded.
    assert ws.catalog.load_table(("lakepub", "orders_daily__ledger")).metadata_location == ledger.metadata_location


def test_two_handles_in_one_process_each_rewrite_from_the_others_commits(ws_path: Path):
    """A publisher keeps the published table's rows and files between its publishes; a commit by
    another handle (same partitions or others) must make it read the table again, not reuse them."""
    first, second = Workspace.open(ws_path), Workspace.open(ws_path)
    events: list[dict] = []
    handles = [first, second, second, first, first, second]
    for i, handle in enumerate(handles):
        batch = [payload(f"o{j}", i + 1) for j in range(i, i + 6)]  # overlapping orders, new versions
        events += batch
        handle.publish("orders_daily", batch, source=f"s{i % 2}",
                       start=handle.committed_positions("orders_daily").get(f"s{i % 2}", {}),
                       end={"p0": handle.committed_positions("orders_daily").get(f"s{i % 2}", {}).get("p0", 0) + 6})
    expected = {d: (c, n) for d, (c, n) in oracle_summary(events).items() if n}
    for handle in (first, second):
        rows = handle.query("SELECT day, cents, orders FROM orders_daily ORDER BY day").to_pylist()
        assert {r["day"]: (r["cents"], r["orders"]) for r in rows} == expected
    assert Workspace.open(ws_path).verify("orders_daily", deep=True).ok


def test_writers_started_together_on_a_fresh_workspace(ws_path: Path, tmp_path: Path):
    """Four publishers race to create the catalog's own tables, the namespace and the dataset's
    tables of a brand-new workspace: every one succeeds and every event counts once."""
    from conftest import publish_together

    writers, batches, size = 4, 2, 10
    plan = {f"s{w}": writer_batches(w, batches, size) for w in range(writers)}
    assert not (ws_path / ".lakepub" / "catalog.db").exists()  # nothing created yet
    results = publish_together(ws_path, plan, tmp_path)
    assert [r.code for r in results] == [0] * writers, [r.err for r in results]
    ws = Workspace.open(ws_path)
    got = {r["day"]: (r["cents"], r["orders"]) for r in ws.query("SELECT * FROM orders_daily").to_pylist()}
    assert got == oracle_summary([e for bl in plan.values() for b in bl for e in b])
    assert ws.committed_positions("orders_daily") == {s: {"p0": batches * size} for s in plan}
