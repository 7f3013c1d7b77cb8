"""Adversarial review of merge-on-read (issue 12): cases the feature's own tests do not drive."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_merge_on_read import Stream, _check, _dataset, _delete_files, _workspace
from lakepub.workspace import Workspace


@pytest.mark.parametrize("partition", ["identity(country)", "bucket(3, tenant)", "identity(plan)"])
def test_merge_on_read_on_other_partitionings_equals_the_oracle(tmp_path: Path, partition: str):
    ws = _workspace(tmp_path / "ws", _dataset("cow", None, partition), _dataset("mor", "merge-on-read", partition))
    stream = Stream(11)
    for size in (30, 12, 25, 7, 40):
        stream.publish(ws, "mor", stream.batch(size))
        _check(ws, stream, "cow", "mor", datafusion=False)
    assert _delete_files(ws, "mor") > 0
    _check(Workspace.open(ws.config.root), stream, "cow", "mor")


@pytest.mark.parametrize("partition", ["identity(country)", "none"])
def test_partial_folds_ledger_compaction_and_the_janitor_between_publishes(tmp_path: Path, partition: str):
    from lakepub.maintenance.compact import compact_ledger
    from lakepub.maintenance.fold import fold_deletes
    from lakepub.maintenance.janitor import JanitorOptions, run_janitor

    root = tmp_path / "ws"
    ws = _workspace(root, _dataset("cow", None, partition), _dataset("mor", "merge-on-read", partition))
    stream = Stream(12)
    for i, size in enumerate((40, 10, 10, 5, 20, 3, 15, 8)):
        stream.publish(ws, "mor", stream.batch(size))
        if i % 3 == 1:
            fold_deletes(Workspace.open(root), "mor", threshold=0.3)
        if i % 3 == 2:
            compact_ledger(Workspace.open(root), "mor")
            run_janitor(Workspace.open(root), options=JanitorOptions(older_than_s=0, retain_last=1))
        _check(ws, stream, "cow", "mor", datafusion=False)
    _check(Workspace.open(root), stream, "cow", "mor")


def test_merge_on_read_through_a_compatible_contract_evolution(ws_path: Path):
    """A widened column and an added one (contract 1.0 -> 1.1) on a table holding delete files:
    the evolving publish and the next ones equal the copy-on-write table, through every reader."""
    from tests.test_evolution import ALL, CONTRACT, NEW, OLD, V1_1, _dataset as _evolved_dataset, _event

    mor = {**ALL, "name": "all_mor", "write_mode": "merge-on-read", "fold_threshold": 1.0}  # keep its delete files
    cow = {**ALL, "name": "all_cow"}
    (ws_path / "catalog" / "contracts" / "customers@v1.0.yaml").write_text(CONTRACT)
    for d in (mor, cow):
        _evolved_dataset(ws_path, d, "contracts/customers@v1.0")
    ws = Workspace.open(ws_path)
    updates = [_event("c1", 2, "DE", "pro", 1100), _event("c3", 2, "US", "basic", 10, seats=None)]
    ws.publish("all_mor", OLD, start={}, end={"p0": 3})
    ws.publish("all_mor", updates, start={"p0": 3}, end={"p0": 5})
    assert _delete_files(ws, "all_mor") > 0
    (ws_path / "catalog" / "contracts" / "customers@v1.1.yaml").write_text(V1_1)
    for d in (mor, cow):
        _evolved_dataset(ws_path, d, "contracts/customers@v1.1")
    ws = Workspace.open(ws_path)
    ws.publish("all_mor", NEW, start={"p0": 5}, end={"p0": 7})
    later = [_event("c4", 2, "US", "basic", 60, seats=4, referrer="mail"), _event("c1", 3, "FR", "pro", 5)]
    ws.publish("all_mor", later, start={"p0": 7}, end={"p0": 9})
    for reader in (Workspace.open(ws_path), ws):
        rows = {n: sorted(map(repr, reader.query(f'SELECT * FROM "{n}"').to_pylist())) for n in ("all_mor", "all_cow")}
        assert rows["all_mor"] == rows["all_cow"] and len(rows["all_cow"]) == 4
        tables = {n: reader.catalog.load_table((reader.config.namespace, n)) for n in ("all_mor", "all_cow")}
        scans = {n: sorted(map(repr, t.scan().to_arrow().to_pylist())) for n, t in tables.items()}
        assert scans["all_mor"] == scans["all_cow"]
        assert reader.verify("all_mor", deep=True).ok


def test_two_publishers_of_the_same_batches_race_on_a_merge_on_read_table(tmp_path: Path):
    """A follower and an overlapping cron run publish the same batches: every batch lands once
    (the loser of each race finds it already published), and the table equals the oracle."""
    import threading

    root = tmp_path / "ws"
    _workspace(root, _dataset("mor", "merge-on-read"), _dataset("cow", None))
    stream = Stream(31, keys=60)
    batches = [stream.batch(n) for n in (40, 15, 15, 15, 15, 15, 15, 15)]
    statuses: list[str] = []
    errors: list[BaseException] = []

    def publisher() -> None:
        try:
            ws, position = Workspace.open(root), 0
            for events in batches:
                result = ws.publish("mor", events, start={"p0": position} if position else {},
                                    end={"p0": position + len(events)})
                statuses.append(result.status)
                position += len(events)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=publisher) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert statuses.count("published") == len(batches), statuses
    stream.position = sum(len(b) for b in batches)
    _check(Workspace.open(root), stream, "mor", "cow")
