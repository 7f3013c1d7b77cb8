"""``lakepub state`` (its versioned JSON shape, against the catalog and DuckDB as oracles) and
``lakepub wait`` (a real subprocess released by a publish; timeouts; data versions; refusals)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import write_jsonl
from lakepub.projection.checksum import partition_checksum
from lakepub.store.record import recorded_checksums
from lakepub.workspace import Workspace


def _ev(oid: str, version: int, day: str | None, cents: int | None, deleted: bool = False) -> dict:
    return {"order_id": oid, "version": version, "day": day, "cents": cents, "deleted": deleted}


def _land(ws_path: Path, name: str, events: list[dict]) -> None:
    folder = ws_path / "landing" / "orders" / "p0"
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(folder / name, events)


def _ok(res):
    assert res.code == 0, res.err
    return res


# The pinned shape of state_version 1: key -> type(s). Adding a key is fine within a version;
# removing or retyping one must bump STATE_VERSION (and this test).
TOP = {"state_version": int, "dataset": str, "readiness": str, "fingerprint": (int, type(None)),
       "lakepub_snapshot_id": (int, type(None)), "data_version": (str, type(None)),
       "last_publish_at": (str, type(None)), "last_publish_ms": (int, type(None)), "positions": dict,
       "partitions": list, "partition_count": (int, type(None)), "retired": (dict, type(None)),
       "metadata_location": (str, type(None)), "note": (str, type(None))}
PARTITION = {"partition": str, "checksum": str, "data_version": (str, type(None)), "snapshot_id": int,
             "published_at": str, "empty": bool}


def _check_shape(doc: dict) -> None:
    assert set(TOP) <= set(doc), set(TOP) - set(doc)
    for key, kind in TOP.items():
        assert isinstance(doc[key], kind), (key, doc[key])
    assert doc["state_version"] == 1
    for p in doc["partitions"]:
        assert set(PARTITION) <= set(p)
        for key, kind in PARTITION.items():
            assert isinstance(p[key], kind), (key, p[key])


def test_state_shape_and_values_against_the_catalog_and_duckdb(ws_path: Path, cli):
    before = _ok(cli("state", "orders_daily", "--format", "json")).json()
    _check_shape(before)
    assert before["readiness"] == "never-published" and before["fingerprint"] is None and before["partitions"] == []

    _land(ws_path, "00000.jsonl", [_ev("A", 1, "2025-10-01", 100), _ev("B", 1, "2025-11-02", 70),
                                   _ev("C", 1, "2025-12-03", 5)])
    _ok(cli("run", "orders_daily"))
    first = _ok(cli("state", "orders_daily", "--format", "json")).json()
    _land(ws_path, "00001.jsonl", [_ev("C", 2, None, None, True), _ev("A", 2, "2025-10-09", 300)])  # empties 2025-12
    _ok(cli("run", "orders_daily"))
    doc = _ok(cli("state", "orders_daily", "--format", "json")).json()
    _check_shape(doc)

    ws = Workspace.open(ws_path)
    table = ws.catalog.load_table("lakepub.orders_daily")
    assert doc["readiness"] == "published"
    assert doc["fingerprint"] == doc["lakepub_snapshot_id"] == table.metadata.current_snapshot_id
    assert doc["metadata_location"] == table.metadata_location
    assert doc["positions"] == {"orders": {"p0": 5}}
    assert doc["last_publish_ms"] == table.current_snapshot().timestamp_ms
    tables = _ok(cli("tables", "--format", "json")).json()
    assert doc["data_version"] == next(t["data_version"] for t in tables if t["name"] == "orders_daily")
    # Partitions: every label ever published, its newest recorded checksum; empty exactly where
    # DuckDB finds no row.
    by_label = {p["partition"]: p for p in doc["partitions"]}
    assert {k: v["checksum"] for k, v in by_label.items()} == recorded_checksums(table)
    months = {r["m"] for r in ws.query("SELECT strftime(day, '%Y-%m') AS m FROM orders_daily").to_pylist()}
    assert months == {"2025-10", "2025-11"}
    assert {k for k, v in by_label.items() if not v["empty"]} == months and by_label["2025-12"]["empty"]
    assert doc["partition_count"] == len(months)
    # 2025-11 was last rewritten by the first publish, the others by the second.
    assert by_label["2025-11"]["snapshot_id"] == first["fingerprint"]
    assert by_label["2025-10"]["snapshot_id"] == by_label["2025-12"]["snapshot_id"] == doc["fingerprint"]
    assert by_label["2025-12"]["checksum"] == partition_checksum(
        ws.dataset("orders_daily").kind.output_schema().empty_table())[:len(by_label["2025-12"]["checksum"])]

    # The Python API is the same document.
    assert ws.state("orders_daily").as_dict() == doc
    text = _ok(cli("state", "orders_daily")).out
    assert "orders_daily: published" in text and "2025-11" in text and str(doc["fingerprint"]) in text

    # Another tool commits the same rows: the head is foreign, lakepub's record stays the checkpoint.
    table.overwrite(table.scan().to_arrow())
    foreign = _ok(cli("state", "orders_daily", "--format", "json")).json()
    assert foreign["readiness"] == "foreign-head" and foreign["fingerprint"] != foreign["lakepub_snapshot_id"]
    assert foreign["lakepub_snapshot_id"] == doc["fingerprint"] and foreign["partitions"] == doc["partitions"]

    bad = cli("state", "nope", "--format", "json")
    assert bad.code == 2 and "unknown dataset 'nope'" in bad.out


def _spawn(ws_path: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "lakepub.cli", "-w", str(ws_path), "wait", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def test_wait_releases_when_the_partition_is_published(ws_path: Path, cli):
    _land(ws_path, "00000.jsonl", [_ev("A", 1, "2025-10-01", 100)])
    _ok(cli("run", "orders_daily"))
    proc = _spawn(ws_path, "orders_daily", "--partition", "2025-11", "--timeout", "120s", "--interval", "1s")
    try:
        time.sleep(3)  # it has started and looked at least once: 2025-11 is not published yet
        assert proc.poll() is None, proc.communicate()
        _land(ws_path, "00001.jsonl", [_ev("B", 1, "2025-11-05", 70)])
        _ok(cli("run", "orders_daily"))
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    state = Workspace.open(ws_path).state("orders_daily")
    assert "waiting for partition 2025-11 of orders_daily" in err
    assert f"ready: partition 2025-11 of orders_daily: snapshot {state.fingerprint}" in out


def test_wait_times_out_data_versions_and_refusals(ws_path: Path, cli):
    never = cli("wait", "orders_daily", "--timeout", "1s", "--interval", "1s")
    assert never.code == 6 and "timed out after 1 s waiting for orders_daily; last seen: never published" in never.err
    _land(ws_path, "00000.jsonl", [_ev("A", 1, "2025-10-01", 100)])
    _ok(cli("run", "orders_daily"))
    version = Workspace.open(ws_path).state("orders_daily").data_version
    # Published, but not this partition: a timeout (exit 6), naming what was seen.
    late = cli("wait", "orders_daily", "--partition", "2025-11", "--timeout", "1s", "--interval", "1s")
    assert late.code == 6 and "partition 2025-11 not published" in late.err
    # The right data version (a 12-digit prefix) releases at once; another one does not.
    hit = _ok(cli("wait", "orders_daily", "--partition", "2025-10", "--data-version", version[:7 + 12],
                  "--timeout", "0s", "--format", "json")).json()
    assert hit["state"]["data_version"] == version and hit["waited_for"]["partition"] == "2025-10"
    miss = cli("wait", "orders_daily", "--partition", "2025-10", "--data-version", "0123456789ab",
               "--timeout", "1s", "--interval", "1s")
    assert miss.code == 6 and f"at data version {version}" in miss.err
    # Month partitions cannot be labelled 2025-10-01: exit 2 at once, not a 1 h wait.
    bad = cli("wait", "orders_daily", "--partition", "2025-10-01", "--timeout", "1h")
    assert bad.code == 2 and "cannot be a partition of orders_daily" in bad.err
    assert cli("wait", "orders_daily", "--timeout", "soon").code == 2
    # A retired dataset is refused at once, not waited for.
    _ok(cli("retire", "orders_daily"))
    gone = cli("wait", "orders_daily", "--timeout", "1h")
    assert gone.code == 3 and "retired" in gone.err
