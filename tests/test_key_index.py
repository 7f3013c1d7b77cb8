"""The ledger's key index (store/key_index.py): same answers as scanning the ledger, bounded runs,
complete or absent, rebuilt by compaction, checked by verify --deep."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import yaml

from conftest import A1, A2, B1, B2, summary_rows
from lakepub import reports
from lakepub.generate import generate_stream
from lakepub.init import init_workspace
from lakepub.keys import order_keys
from lakepub.store import key_index
from lakepub.store.key_index import KeyIndex
from lakepub.store.layout import load_tables
from lakepub.workspace import Workspace


# --- the index on its own ----------------------------------------------------------------------


def _ledger_rows(rng: np.random.Generator, first: int, n: int) -> pa.Table:
    """``n`` ledger rows of orders first.. with 1-3 versions each (nulls in day/cents/floor)."""
    orders = np.repeat(np.arange(first, first + n), rng.integers(1, 4, n))[:n]
    ids = pa.array([f"o{i}" for i in orders])
    k1, k2 = order_keys(ids)
    version = _versions(orders)
    deleted = rng.random(n) < 0.1
    return pa.table({
        "k1": k1, "k2": k2, "version": version,
        "day": pa.array(np.where(deleted, 0, rng.integers(19000, 20000, n)).astype(np.int32), pa.int32(),
                        mask=deleted).cast(pa.date32()),
        "cents": pa.array(rng.integers(0, 10_000, n), mask=deleted),
        "deleted": deleted,
        "floor": pa.array(version, mask=rng.random(n) < 0.8),  # compaction's floor is the version
    })


def _versions(orders: np.ndarray) -> np.ndarray:
    out = np.ones(len(orders), np.int64)
    for i in range(1, len(orders)):
        if orders[i] == orders[i - 1]:
            out[i] = out[i - 1] + 1
    return out


def _expected(all_rows: pa.Table, k1: np.ndarray, k2: np.ndarray) -> list[tuple]:
    where = {(a, b): i for i, (a, b) in enumerate(zip(k1.tolist(), k2.tolist()))}
    out = []
    for row in all_rows.to_pylist():
        i = where.get((row["k1"], row["k2"]))
        if i is not None:
            out.append((i, *(row[c] for c in key_index.PAYLOAD)))
    return sorted(out, key=repr)


def _found(table: pa.Table, positions: np.ndarray) -> list[tuple]:
    rows = table.to_pylist()
    return sorted(((int(i), *(r[c] for c in key_index.PAYLOAD)) for i, r in zip(positions, rows)), key=repr)


def test_lookups_and_merges_match_a_brute_force_scan(tmp_path: Path, monkeypatch):
    # Tiny merge chunks and run limit, so that a few thousand rows go through cascades of merges,
    # the MAX_RUNS fallback, and runs made of several record batches.
    monkeypatch.setattr(key_index, "BATCH_ROWS", 150)
    monkeypatch.setattr(key_index, "MAX_RUNS", 6)
    rng = np.random.default_rng(3)
    index = KeyIndex(tmp_path / "index")
    runs: list[key_index.Run] = []
    listed: set[str] = set()
    parts: list[pa.Table] = []
    first = 0
    for step in range(40):
        n = int(rng.choice([5, 30, 60, 400]))
        rows = _ledger_rows(rng, first, n)
        first += n
        parts.append(rows)
        runs = index.append(runs, key_index.index_rows(rows))
        listed |= {r.name for r in runs}
        all_rows = pa.concat_tables(parts)
        assert sum(r.rows for r in runs) == all_rows.num_rows
        assert len(runs) <= key_index.MAX_RUNS + 1
        for run in runs:
            keys = np.concatenate([b.column("k1").to_numpy() for b in index.batches(run)])
            assert (keys[1:] >= keys[:-1]).all(), "a run must be sorted by k1"
        if step % 5 == 4:
            # Keys present (several versions each), absent, and repeated k1 with another k2.
            present = all_rows.take(pa.array(rng.choice(all_rows.num_rows, 50, replace=False)))
            k1 = np.concatenate([present.column("k1").to_numpy(), rng.integers(-2**63, 2**63 - 1, 30),
                                 present.column("k1").to_numpy()[:5]])
            k2 = np.concatenate([present.column("k2").to_numpy(), rng.integers(-2**63, 2**63 - 1, 30),
                                 present.column("k2").to_numpy()[:5] + 1])
            k1, k2 = _unique_pairs(k1, k2)
            assert _found(*index.lookup(runs, k1, k2)) == _expected(all_rows, k1, k2)
    # Every run file ever written was listed by some append: merges planned ahead write no
    # run that a cascade merges away at once.
    assert {p.name for p in (tmp_path / "index").iterdir()} == listed


def _unique_pairs(k1: np.ndarray, k2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    _, first = np.unique(np.stack([k1, k2], axis=1), axis=0, return_index=True)
    first.sort()
    return k1[first], k2[first]


@pytest.mark.parametrize("sizes, max_runs, max_writes", [
    ([100] * 3000, 16, 6),  # many tiny batches: no run is re-merged at every few appends
    ([88_000] * 10, 4, 2),  # the throughput benchmark's shape
    ([1_000_000] * 10 + [88_000] * 20, 8, 3),  # the history benchmark's shape
    (list(np.random.default_rng(1).integers(60_000, 90_000, 100)), 10, 5),  # uneven batches
    ([7, 70_000, 7, 70_000] * 10, 16, 4),  # adversarial: MAX_RUNS bounds the run count
])
def test_runs_stay_few_and_rows_are_rewritten_few_times(sizes, max_runs, max_writes):
    runs: list[key_index.Run] = []
    written = 0
    for i, rows in enumerate(sizes):
        groups = key_index.plan_append(runs, int(rows))
        runs = []
        for j, group in enumerate(groups):
            if len(group) == 1 and group[0] is not None:
                runs.append(group[0])
                continue
            total = sum(int(rows) if r is None else r.rows for r in group)
            written += total  # a new or merged run is written once
            runs.append(key_index.Run(f"r{i}-{j}", total))
        assert len(runs) <= max(max_runs, key_index.MAX_RUNS)
        assert len(runs) <= max_runs
    assert sum(r.rows for r in runs) == sum(int(x) for x in sizes)
    assert written / sum(int(x) for x in sizes) <= max_writes


# --- through the public interface -------------------------------------------------------------


def _workspace(root: Path, *, index: bool) -> Workspace:
    init_workspace(root)
    config = yaml.safe_load((root / "lakepub.yaml").read_text())
    config["key_index"] = index
    (root / "lakepub.yaml").write_text(yaml.safe_dump(config))
    return Workspace.open(root)


def _ledger(ws: Workspace) -> list[tuple]:
    return sorted(ws.query("SELECT order_id, version, day, cents, deleted, floor FROM "
                           f"iceberg_scan('{_tables(ws).ledger.metadata_location}')").to_pylist(), key=repr)


def _tables(ws: Workspace):
    return load_tables(ws.catalog, ws.config.namespace, "orders_daily")


def _runs(ws: Workspace) -> list[key_index.Run] | None:
    return key_index.runs_of(_tables(ws).ledger.current_snapshot())


def test_publish_with_the_index_equals_publish_by_scan(tmp_path: Path):
    indexed, scanned = _workspace(tmp_path / "a", index=True), _workspace(tmp_path / "b", index=False)
    for ws in (indexed, scanned):
        generate_stream(ws.config.landing_dir("orders"), events=6000, partitions=3, days=60, seed=11,
                        segment_size=400)
        ws.run("orders_daily", max_batch=250)  # 24 publishes: corrections, deletes, late events
    assert summary_rows(indexed) == summary_rows(scanned)
    assert _ledger(indexed) == _ledger(scanned)
    runs = _runs(indexed)
    assert runs is not None and 1 <= len(runs) <= key_index.MAX_RUNS
    assert sum(r.rows for r in runs) == len(_ledger(indexed))
    assert _runs(scanned) is None
    assert not (Path(_tables(scanned).ledger.location().removeprefix("file://")) / "index").exists()
    assert reports.verify(indexed, "orders_daily", deep=True).ok


def test_no_partial_index_then_compaction_builds_a_complete_one(tmp_path: Path):
    root = tmp_path / "ws"
    ws = _workspace(root, index=False)
    ws.publish("orders_daily", [A1, A2], start={}, end={"p0": 2})
    ws = _workspace_with(root, index=True)
    ws.publish("orders_daily", [B2], start={"p0": 2}, end={"p0": 3})
    assert _runs(ws) is None, "a ledger without an index must not start a partial one"
    ws.publish("orders_daily", [B1], start={"p0": 3}, end={"p0": 4})  # late B/v1: found by the scan
    assert summary_rows(ws) == [("2025-10-02", 150, 1)]

    from lakepub.maintenance.compact import compact_ledger

    compact_ledger(ws, "orders_daily")
    runs = _runs(ws)
    # A/v2, B/v2 (tombstone) with floors set, and the versions compaction dropped (A/v1, B/v1)
    assert runs is not None and [r.rows for r in runs] == [4]
    assert reports.verify(Workspace.open(root), "orders_daily", deep=True).ok
    ws = Workspace.open(root)
    late = ws.publish("orders_daily", [A1, B1, dict(A2, order_id="C")], start={"p0": 4}, end={"p0": 7})
    # the index carries the floors and the dropped versions: A/v1, B/v1 are duplicates, as before compaction
    assert late.counts.duplicates == 2 and late.counts.new_versions == 1
    assert [r.rows for r in _runs(ws)] == [4, 1]
    assert summary_rows(ws) == [("2025-10-02", 300, 2)]


def _workspace_with(root: Path, *, index: bool) -> Workspace:
    config = yaml.safe_load((root / "lakepub.yaml").read_text())
    config["key_index"] = index
    (root / "lakepub.yaml").write_text(yaml.safe_dump(config))
    return Workspace.open(root)


def test_verify_deep_catches_an_index_that_disagrees_with_the_ledger(tmp_path: Path):
    ws = _workspace(tmp_path / "ws", index=True)
    ws.publish("orders_daily", [A1, A2, B2], start={}, end={"p0": 3})
    assert reports.verify(ws, "orders_daily", deep=True).ok
    (run,) = _runs(ws)
    folder = key_index.folder_of(_tables(ws).ledger.location())
    table = pa.Table.from_batches(KeyIndex(folder).batches(run))
    bad = table.set_column(2, "version", pa.array(np.asarray(table.column("version")) + 1))
    key_index.write_run(folder, [bad])  # a different file: runs are immutable; swap contents
    (folder / run.name).unlink()
    next(p for p in folder.iterdir()).rename(folder / run.name)
    report = reports.verify(Workspace.open(ws.config.root), "orders_daily", deep=True)
    assert not report.ok and "key index" in report.mismatches[-1], report.mismatches


def test_bad_key_index_setting_is_a_one_line_error(ws_path: Path, cli):
    config = yaml.safe_load((ws_path / "lakepub.yaml").read_text())
    config["key_index"] = "yes please"
    (ws_path / "lakepub.yaml").write_text(yaml.safe_dump(config))
    res = cli("status", "orders_daily")
    assert res.code != 0 and "'key_index' must be true or false" in res.err, res.err
    assert "Traceback" not in res.err and len(res.err.strip().splitlines()) == 1


def test_a_run_deleted_by_hand_falls_back_to_the_scan_until_compaction(tmp_path: Path):
    ws = _workspace(tmp_path / "ws", index=True)
    ws.publish("orders_daily", [A1, B2], start={}, end={"p0": 2})
    (run,) = _runs(ws)
    (key_index.folder_of(_tables(ws).ledger.location()) / run.name).unlink()
    report = reports.verify(Workspace.open(ws.config.root), "orders_daily", deep=True)
    assert not report.ok and "unreadable" in report.mismatches[-1], report.mismatches

    ws = Workspace.open(ws.config.root)
    with pytest.warns(UserWarning, match="key index unreadable"):
        late = ws.publish("orders_daily", [A2, B1], start={"p0": 2}, end={"p0": 4})
    assert late.counts.stale == 1  # B/v1 under the tombstone B/v2: found by the scan
    assert summary_rows(ws) == [("2025-10-02", 150, 1)]
    assert _runs(ws) is None  # no partial index on top
    assert reports.verify(Workspace.open(ws.config.root), "orders_daily", deep=True).ok

    from lakepub.maintenance.compact import compact_ledger

    compact_ledger(ws, "orders_daily")
    assert [r.rows for r in _runs(ws)] == [4]  # A/v2, B/v2 and the dropped A/v1, B/v1
    assert reports.verify(Workspace.open(ws.config.root), "orders_daily", deep=True).ok
