"""Failures get the exit code of what the caller should do next: a locked catalog and a full disk
are retryable (4), a full disk while the pointer swap commits is an unknown outcome (5), and a
corrupt metadata JSON, manifest list or manifest is one line naming the file (1), never an abort."""

from __future__ import annotations

import errno
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import A1, A2, B1, B2, published_pointers, summary_rows, write_jsonl
from lakepub.errors import CatalogBusy, DiskFull, OutcomeUnknown
from lakepub.store.layout import ledger_id, summary_id
from lakepub.workspace import Workspace

DATASET = "orders_daily"


def _enospc(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, "No space left on device", "/full/disk/file")


def _short_busy_timeout(root: Path) -> Path:
    """Give the SQLite catalog a 0.2 s busy timeout; return its database file."""
    path = root / "lakepub.yaml"
    config = yaml.safe_load(path.read_text())
    config["catalog"]["uri"] = "sqlite:///.lakepub/catalog.db?timeout=0.2"
    path.write_text(yaml.safe_dump(config))
    return root / ".lakepub" / "catalog.db"


# --- a locked catalog (exit 4) ---------------------------------------------------------------


def test_locked_sqlite_catalog_is_retryable_and_publishes_nothing(ws: Workspace, ws_path: Path, cli, tmp_path: Path):
    ws.publish(DATASET, [A1], start={}, end={"p0": 1})
    db = _short_busy_timeout(ws_path)
    before = published_pointers(ws)
    batch = write_jsonl(tmp_path / "b.jsonl", [A2])
    lock = sqlite3.connect(db, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        result = cli("publish", DATASET, "--events", str(batch), "--start", '{"p0": 1}', "--end", '{"p0": 2}')
        status = cli("status", DATASET)
        with pytest.raises(CatalogBusy):
            Workspace.open(ws_path).publish(DATASET, [A2], start={"p0": 1}, end={"p0": 2})
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert result.code == 4, result.err
    assert "locked" in result.err and len(result.err.strip().splitlines()) == 1
    assert status.code == 4, status.err
    assert published_pointers(ws) == before
    # Retrying once the lock is gone publishes the batch.
    assert cli("publish", DATASET, "--events", str(batch), "--start", '{"p0": 1}', "--end", '{"p0": 2}').code == 0


# --- a full disk (exit 4 before the pointer swap, 5 during its COMMIT) -------------------------


@pytest.mark.parametrize("where", ["data-file", "metadata", "ordered-metadata"])
def test_disk_full_before_the_commit_is_retryable_and_publishes_nothing(ws_path: Path, cli, tmp_path: Path,
                                                                         monkeypatch, where):
    if where == "ordered-metadata":
        path = ws_path / "lakepub.yaml"
        path.write_text(path.read_text() + "commit: ordered\n")
    ws = Workspace.open(ws_path)
    ws.publish(DATASET, [A1], start={}, end={"p0": 1})
    before = published_pointers(ws)
    if where == "data-file":
        monkeypatch.setattr("lakepub.store.files.pq.ParquetWriter", _enospc)
    else:  # the new metadata JSON, written before the pointers move
        from pyiceberg.catalog import MetastoreCatalog
        monkeypatch.setattr(MetastoreCatalog, "_write_metadata", staticmethod(_enospc))
    batch = write_jsonl(tmp_path / "b.jsonl", [A2, B1])
    result = cli("publish", DATASET, "--events", str(batch), "--start", '{"p0": 1}', "--end", '{"p0": 3}')
    assert result.code == 4, result.err
    assert "no space left" in result.err.lower() and len(result.err.strip().splitlines()) == 1
    with pytest.raises(DiskFull):
        Workspace.open(ws_path).publish(DATASET, [A2, B1], start={"p0": 1}, end={"p0": 3})
    assert published_pointers(ws) == before
    monkeypatch.undo()
    assert cli("publish", DATASET, "--events", str(batch), "--start", '{"p0": 1}', "--end", '{"p0": 3}').code == 0


def test_disk_full_during_the_pointer_swap_commit_is_an_unknown_outcome(ws: Workspace, cli, tmp_path: Path,
                                                                      monkeypatch):
    from lakepub.store import commit

    class FullAtCommit(commit.Session):
        def commit(self):
            _enospc()

    ws.publish(DATASET, [A1], start={}, end={"p0": 1})
    monkeypatch.setattr(commit, "Session", FullAtCommit)
    batch = write_jsonl(tmp_path / "b.jsonl", [A2])
    result = cli("publish", DATASET, "--events", str(batch), "--start", '{"p0": 1}', "--end", '{"p0": 2}')
    assert result.code == 5, result.err
    with pytest.raises(OutcomeUnknown):
        Workspace.open(ws.config.root).publish(DATASET, [A2], start={"p0": 1}, end={"p0": 2})


# --- corrupt metadata and manifests (exit 1, one line naming the file) -------------------------

# Each command runs in one child process (a DuckDB abort would kill pytest itself).
_RUN_COMMANDS = """
import json, sys
from click.testing import CliRunner
from lakepub.cli import main
root, commands = sys.argv[1], json.loads(sys.argv[2])
out = []
for args in commands:
    r = CliRunner().invoke(main, ["-w", root, *args])
    out.append([args, r.exit_code, r.stderr, repr(r.exception) if r.exit_code not in (0, 1, 2, 3, 4, 5) else ""])
print(json.dumps(out))
"""


def _corrupt(ws: Workspace, which: str) -> str:
    table = ws.catalog.load_table(summary_id(ws.config.namespace, DATASET))
    snapshot = table.current_snapshot()
    location = {
        "metadata-json": table.metadata_location,
        "metadata-json-valid": table.metadata_location,
        "manifest-list": snapshot.manifest_list,
        "manifest": snapshot.manifests(table.io)[0].manifest_path,
        "manifest-truncated": snapshot.manifests(table.io)[0].manifest_path,
    }[which]
    path = Path(location.removeprefix("file://"))
    data = path.read_bytes()
    if which == "metadata-json-valid":
        path.write_text(json.dumps({"format-version": 2, "location": "nowhere"}))
    elif which == "manifest-truncated":
        path.write_bytes(data[: len(data) // 3])
    else:  # flip bytes after the first ones: magic numbers and the JSON's start stay intact
        middle = len(data) // 2
        path.write_bytes(data[:8] + bytes(b ^ 0xA5 for b in data[8:middle]) + data[middle:])
    return str(path)


@pytest.mark.parametrize("which", ["metadata-json", "metadata-json-valid", "manifest-list", "manifest",
                                   "manifest-truncated"])
def test_a_corrupt_table_file_is_one_line_naming_it(ws: Workspace, ws_path: Path, tmp_path: Path, which):
    ws.publish(DATASET, [A1, B1], start={}, end={"p0": 2})
    path = _corrupt(ws, which)
    batch = write_jsonl(tmp_path / "b.jsonl", [A2])
    commands = [["query", f"SELECT * FROM {DATASET}"], ["verify", DATASET], ["verify", DATASET, "--deep"],
                ["status", DATASET], ["log", DATASET],
                ["publish", DATASET, "--events", str(batch), "--start", '{"p0": 2}', "--end", '{"p0": 3}']]
    proc = subprocess.run([sys.executable, "-c", _RUN_COMMANDS, str(ws_path), json.dumps(commands)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-600:]}"  # 134: DuckDB aborted
    results = json.loads(proc.stdout)
    if which.startswith("manifest"):  # `log` reads snapshot summaries only, never a manifest
        results = [r for r in results if r[0][0] != "log"]
    for args, code, err, exc in results:
        assert code == 1, (args, code, err, exc)
        assert err.startswith("error: corrupt Iceberg file ") and path in err, (args, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, (args, err)


def test_manifests_in_a_codec_duckdb_cannot_decode_are_a_refusal_saying_which_property(ws_path: Path, cli,
                                                                                      tmp_path: Path):
    """Another tool sets ``write.avro.compression-codec: zstandard`` on lakepub's tables: pyiceberg
    then writes zstd manifests, which DuckDB 1.5.5 cannot decode. Publishing and `query` still
    give the right rows; `verify --deep` reads through ``iceberg_scan`` and used to end in an
    "internal error": it must be a refusal (exit 3) naming the property to set back."""
    def publish(events, start, end):
        path = write_jsonl(tmp_path / f"b{end}.jsonl", events)
        res = cli("publish", "orders_daily", "--events", str(path), "--start", json.dumps({"p0": start}),
                  "--end", json.dumps({"p0": end}))
        assert res.code == 0, res.err

    publish([A1, B1], 0, 2)
    ws = Workspace.open(ws_path)
    for ident in (summary_id(ws.config.namespace, "orders_daily"), ledger_id(ws.config.namespace, "orders_daily")):
        with ws.catalog.load_table(ident).transaction() as tx:
            tx.set_properties({"write.avro.compression-codec": "zstandard"})
    publish([A2, B2], 2, 4)
    assert summary_rows(ws) == [("2025-10-02", 150, 1)]  # the seed's answer

    res = cli("verify", "orders_daily", "--deep", "--format", "json")
    assert res.code == 3, (res.out, res.err)
    doc = json.loads(res.out)
    assert doc["kind"] == "refused" and doc["type"] == "UndecodableManifests"
    assert "write.avro.compression-codec" in doc["message"] and "gzip" in doc["message"]
    assert "Traceback" not in res.err
