"""The fast paths of a derived build (issue 14 performance) through the CLI and API, read back by DuckDB.

A daily rollup over ``orders_daily`` built by ``reconcile --workers 2`` in windows of 2 days:
its files are DuckDB's (``store/duck_files.py``: Hive folders, field ids), ``lakepub query``
returns the SQL run directly over the upstream (the oracle), and every recorded partition
checksum equals the one recomputed from the rows read back (``rebuild.audit``). A definition
with a double column is written by pyarrow instead (DuckDB turns -0.0 into 0.0) and audits the
same. An offline rebuild (new definition) audits and swaps; a later routine window that replaces
partitions compacts the appended manifests into one.
"""

from __future__ import annotations

from pathlib import Path

from test_derive import FIRST, _define, _ok, _order, _publish, _rows

DAILY = {"name": "orders_by_day",
         "projection": {"kind": "sql", "inputs": {"orders_daily": "day(day)"},
                        "query": "SELECT day, sum(cents) AS cents, count(*) AS n FROM orders_daily GROUP BY 1"},
         "partition": "day(day)"}
FLOATS = {"name": "orders_share",
          "projection": {"kind": "sql", "inputs": {"orders_daily": "day(day)"},
                         "query": "SELECT day, CAST(sum(cents) AS DOUBLE) * -0.0 AS share FROM orders_daily GROUP BY 1"},
          "partition": "day(day)"}


def _audit(ws_path: Path, name: str) -> int:
    from lakepub.derive.rebuild import audit
    from lakepub.derive.state import Context
    from lakepub.workspace import Workspace

    with Workspace.open(ws_path) as ws:
        return audit(Context(ws), name, name)


def _files(ws_path: Path, name: str) -> list[str]:
    from lakepub.store.duck_files import live_files
    from lakepub.store.layout import summary_id
    from lakepub.workspace import Workspace

    with Workspace.open(ws_path) as ws:
        table = ws.catalog.load_table(summary_id(ws.config.namespace, name))
        return [f.file_path for f in live_files(table)], len(table.current_snapshot().manifests(table.io))


def _name_dashes(path: str) -> int:
    return path.rsplit("/", 1)[1].count("-")


def test_threaded_build_with_duckdb_files_audits_and_equals_the_oracle(cli, ws_path):
    _publish(cli, ws_path, FIRST + [_order("F", 1, "2025-10-20", 6), _order("G", 1, "2025-10-21", 7)])
    _define(ws_path, DAILY, FLOATS)
    _ok(cli("reconcile", "--workers", "2", "--batch-partitions", "2"))
    oracle = "SELECT day, sum(cents) AS cents, count(*) AS n FROM orders_daily GROUP BY 1 ORDER BY 1"
    assert _rows(cli, "SELECT * FROM orders_by_day ORDER BY 1") == _rows(cli, oracle)
    paths, manifests = _files(ws_path, "orders_by_day")
    # DuckDB's names: 00000-<i>-<window uuid>-<file uuid>.parquet (pyarrow's: 00000-<i>-<uuid>.parquet)
    assert len(paths) == 6 and all("/data/day_day=" in p and _name_dashes(p) == 11 for p in paths)
    assert manifests == 3  # 3 windows of 2 days, each appended its own manifest
    assert _audit(ws_path, "orders_by_day") == 6
    paths, _ = _files(ws_path, "orders_share")
    assert len(paths) == 6 and all(_name_dashes(p) == 6 for p in paths)  # a double column: pyarrow's files
    assert _audit(ws_path, "orders_share") == 6
    # a routine window replacing partitions: new rows for one day, the manifests compacted into one
    _publish(cli, ws_path, [_order("H", 1, "2025-10-20", 1000)])
    _ok(cli("reconcile", "orders_by_day"))
    assert _rows(cli, "SELECT * FROM orders_by_day ORDER BY 1") == _rows(cli, oracle)
    assert _files(ws_path, "orders_by_day")[1] == 1
    assert _audit(ws_path, "orders_by_day") == 6
    # an offline rebuild (new definition): built beside, audited (DuckDB read-back), swapped in
    _define(ws_path, {**DAILY, "projection": {**DAILY["projection"], "query": DAILY["projection"]["query"].replace(
        "count(*) AS n", "count(*) + 1 AS n")}})
    _ok(cli("reconcile", "orders_by_day"))
    assert _rows(cli, "SELECT * FROM orders_by_day ORDER BY 1") == [
        {**r, "n": r["n"] + 1} for r in _rows(cli, oracle)]
    assert _audit(ws_path, "orders_by_day") == 6


def test_audit_decodes_the_manifests_it_checks(cli, ws_path, monkeypatch):
    """The rebuild audit's read-back decodes the table's manifests from their bytes (what the
    swap publishes), not the entries this process remembers writing (``live_files``): those
    would hide a manifest that lacks a file (tests/test_review_derive_merge14.py). DuckDB's
    ``iceberg_scan`` decodes them for the rows (pyiceberg reads them only to check they are
    readable): a window's manifest replaced on disk by another window's fails the audit (its days
    missing, the other's read twice)."""
    import shutil

    import pytest
    from pyiceberg.manifest import ManifestFile

    from lakepub.errors import VerifyFailed
    from lakepub.store.layout import summary_id
    from lakepub.workspace import Workspace

    _publish(cli, ws_path, FIRST)
    _define(ws_path, DAILY)
    _ok(cli("reconcile", "--batch-partitions", "2"))
    with Workspace.open(ws_path) as ws:
        table = ws.catalog.load_table(summary_id(ws.config.namespace, "orders_by_day"))
        paths = [m.manifest_path.removeprefix("file://") for m in table.current_snapshot().manifests(table.io)]
    assert len(paths) == 3  # the 3 windows' manifests, each written once under its own name
    # Before any read of them in this process (DuckDB's file cache would serve bytes read before
    # from a path rewritten in place within the same second; lakepub never rewrites a manifest).
    shutil.copyfile(paths[1], paths[0])
    decoded = []
    original = ManifestFile.fetch_manifest_entry
    monkeypatch.setattr(ManifestFile, "fetch_manifest_entry",
                        lambda self, *a, **k: decoded.append(self.manifest_path) or original(self, *a, **k))
    with pytest.raises(VerifyFailed, match="rebuild audit of orders_by_day"):
        _audit(ws_path, "orders_by_day")
    # The rows come from DuckDB's decode of the files (the replaced manifest's days missing): pyiceberg
    # only reads the manifests to check they are readable (store.integrity.check_scannable: DuckDB
    # aborts the process on one it cannot read, tests/test_review_derive_scan_audit.py), and from disk.
    assert sorted(decoded) == sorted(f"file://{p}" for p in paths)


def test_input_labels_scanned_once_per_input_snapshot_and_remembered_on_disk(cli, ws_path, monkeypatch):
    """A daily output over the monthly orders_daily: its candidates are the input's distinct days
    (``derive/labels.py``), scanned once per input snapshot; a new process reads them from
    ``.lakepub/labels/`` (a damaged file is ignored), a new input snapshot is scanned again."""
    from lakepub.derive import labels
    from lakepub.derive.state import Context, candidates
    from lakepub.workspace import Workspace

    _publish(cli, ws_path, FIRST)
    _define(ws_path, DAILY)
    scans = []
    original = labels._scan
    monkeypatch.setattr(labels, "_scan", lambda *a: scans.append(1) or original(*a))

    def days() -> set[str]:
        with Workspace.open(ws_path) as ws:
            ctx = Context(ws)
            return candidates(ctx, ctx.graph.derived["orders_by_day"])

    labels.clear_memo()
    first = days()
    assert len(first) == 5 and len(scans) == 1
    assert days() == first and len(scans) == 1  # the process memo
    labels.clear_memo()  # as a new process: from the file
    assert days() == first and len(scans) == 1
    (cache,) = (ws_path / ".lakepub" / "labels").glob("*.json")
    cache.write_text("{not json")
    labels.clear_memo()
    assert days() == first and len(scans) == 2  # a damaged file: scanned again (and rewritten)
    _publish(cli, ws_path, [_order("Z", 1, "2025-12-01", 5)])  # a new input snapshot, one more day
    assert days() == first | {"2025-12-01"} and len(scans) == 3
    _ok(cli("reconcile"))
    oracle = "SELECT day, sum(cents) AS cents, count(*) AS n FROM orders_daily GROUP BY 1 ORDER BY 1"
    assert _rows(cli, "SELECT * FROM orders_by_day ORDER BY 1") == _rows(cli, oracle)


def test_offline_rebuild_lists_the_catalog_once(cli, ws_path, monkeypatch):
    """An offline rebuild lists the catalog's tables once (its first plan looks for abandoned
    rebuild tables); the plan after its windows and the one just before the swap do not (issue
    14: a catalog query each), and the rebuild still audits, swaps and reads back as the oracle."""
    from pyiceberg.catalog.sql import SqlCatalog

    _publish(cli, ws_path, FIRST)
    _define(ws_path, DAILY)
    _ok(cli("reconcile"))
    listings = []
    original = SqlCatalog.list_tables
    monkeypatch.setattr(SqlCatalog, "list_tables", lambda self, namespace: listings.append(namespace) or
                        original(self, namespace))
    _define(ws_path, {**DAILY, "projection": {**DAILY["projection"], "query": DAILY["projection"]["query"].replace(
        "count(*) AS n", "count(*) + 1 AS n")}})
    _ok(cli("reconcile", "orders_by_day"))
    assert len(listings) == 1
    oracle = "SELECT day, sum(cents) AS cents, count(*) + 1 AS n FROM orders_daily GROUP BY 1 ORDER BY 1"
    assert _rows(cli, "SELECT * FROM orders_by_day ORDER BY 1") == _rows(cli, oracle)
    assert _audit(ws_path, "orders_by_day") == len(_rows(cli, oracle))


def test_a_table_loaded_again_at_the_same_pointer_is_not_parsed_again(cli, ws_path, monkeypatch):
    """``store.commit.load_table`` (what ``derive/state.Context.table`` loads with) reads the
    catalog's pointer on every load, and parses the metadata file it names once per process: the
    same table as pyiceberg's ``load_table``, the new metadata once the pointer moved, pyiceberg's
    NoSuchTableError for a table that is not there."""
    import pytest
    from pyiceberg.exceptions import NoSuchTableError
    from pyiceberg.serializers import FromInputFile

    from lakepub.store import commit
    from lakepub.store.layout import summary_id
    from lakepub.workspace import Workspace
    from test_derive import _order

    _publish(cli, ws_path, FIRST)
    _define(ws_path, DAILY)
    _ok(cli("reconcile"))
    parsed = []
    original = FromInputFile.table_metadata
    monkeypatch.setattr(FromInputFile, "table_metadata",
                        staticmethod(lambda file, *a, **k: parsed.append(file.location) or original(file, *a, **k)))

    def same(table, oracle) -> None:
        assert (table.name(), table.metadata_location, table.metadata) == \
            (oracle.name(), oracle.metadata_location, oracle.metadata)
        assert table.io.properties == oracle.io.properties and table.catalog is oracle.catalog

    with Workspace.open(ws_path) as ws:
        ident = summary_id(ws.config.namespace, "orders_by_day")
        commit._PARSED.clear()  # noqa: SLF001 - as a new process
        first = commit.load_table(ws.catalog, ident)
        again = commit.load_table(ws.catalog, ident)
        assert parsed == [first.metadata_location]  # parsed once
        oracle = ws.catalog.load_table(ident)
        same(first, oracle)
        same(again, oracle)
        _publish(cli, ws_path, [_order("H", 1, "2025-10-20", 1000)])
        _ok(cli("reconcile", "orders_by_day"))  # the pointer moves
        moved = commit.load_table(ws.catalog, ident)
        assert moved.metadata_location != first.metadata_location
        same(moved, ws.catalog.load_table(ident))
        with pytest.raises(NoSuchTableError):
            commit.load_table(ws.catalog, summary_id(ws.config.namespace, "no_such_table"))
