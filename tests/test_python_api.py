"""The Python API: lazy exports, the context manager, janitor/compact/init from Python, docstrings.

Maintenance runs on real tables, read back by DuckDB (``iceberg_scan`` of the catalog's metadata
locations) before and after.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import lakepub
from conftest import A1, A2, B1, B2
from lakepub import duck


def _batches(ws: lakepub.Workspace, n: int) -> list[lakepub.PublishResult]:
    """n publishes moving the same orders between days (corrections, so the ledger grows)."""
    out = []
    for i in range(n):
        events = [dict(A1, version=i + 1, day=f"2025-10-{1 + i % 5:02d}", cents=100 + i),
                  dict(B1, version=i + 1, cents=70 + i)]
        out.append(ws.publish("orders_daily", events, start={"p0": 2 * i}, end={"p0": 2 * i + 2}))
    return out


def _read(location: str, sql: str = "SELECT count(*), sum(cents) FROM t") -> tuple:
    con = duck.connect()
    try:
        con.execute(f"CREATE TEMP VIEW t AS SELECT * FROM {duck.scan_sql(location)}")
        return con.execute(sql).fetchone()
    finally:
        con.close()


def test_import_lakepub_is_cheap_and_names_load_on_use():
    code = ("import sys, lakepub\n"
            "heavy = [m for m in ('duckdb', 'pyarrow', 'pyiceberg', 'lakepub.workspace') if m in sys.modules]\n"
            "err = lakepub.StaleStart\n"
            "print(heavy, err.__module__, 'duckdb' in sys.modules, sorted(set(lakepub.__all__) - set(dir(lakepub))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] lakepub.errors False []"
    with pytest.raises(AttributeError):
        lakepub.NoSuchThing  # noqa: B018


def test_py_typed_marker_ships_with_the_package():
    from importlib.resources import files

    assert files("lakepub").joinpath("py.typed").is_file()
    pyproject = (Path(lakepub.__file__).parent.parent / "pyproject.toml").read_text()
    assert '"py.typed"' in pyproject  # package-data: installed wheels carry it too


def test_context_manager_closes_what_it_opened_and_errors_are_importable(tmp_path: Path):
    with lakepub.Workspace.init(tmp_path / "shop") as ws:
        result = ws.publish("orders_daily", [A1, A2, B2, B1], start={"p0": 0}, end={"p0": 4})
        assert isinstance(result, lakepub.PublishResult) and result.status == "published"
        publisher = ws.publisher("orders_daily")
        con = publisher.con  # the DuckDB connection the publisher opened
        engine = ws.catalog.engine
        with pytest.raises(lakepub.StaleStart) as caught:
            ws.publish("orders_daily", [A1], start={"p0": 0}, end={"p0": 1})
        assert isinstance(caught.value, lakepub.BlockedError) and caught.value.exit_code == 3
        assert caught.value.details() == {"source": "orders", "start": {}, "committed": {"p0": 4}}
    with pytest.raises(duckdb.ConnectionException):
        con.execute("SELECT 1")
    assert engine.pool.checkedout() == 0 and "catalog" not in ws.__dict__ and ws._publishers == {}
    # used again, it reopens what it needs
    assert ws.query("SELECT sum(cents)::BIGINT AS c FROM orders_daily").to_pylist() == [{"c": 150}]
    ws.close()
    with pytest.raises(lakepub.ConfigError):
        lakepub.Workspace.init(tmp_path / "shop")  # already a workspace
    written = lakepub.init_workspace(tmp_path / "other")
    assert {p.name for p in written} >= {"lakepub.yaml", "orders_daily.yaml"} and all(p.is_file() for p in written)


def test_janitor_from_python_expires_history_and_keeps_the_published_data(tmp_path: Path):
    with lakepub.Workspace.init(tmp_path / "shop") as ws:
        _batches(ws, 6)
        location = ws.published_tables()["orders_daily"]
        before = _read(location)
        dry = ws.janitor(older_than="0s", retain_last=1, dry_run=True)
        assert dry.options.dry_run and dry.totals()["snapshots_expired"] > 0
        assert ws.published_tables()["orders_daily"] == location  # a dry run changes nothing
        report = ws.janitor(["orders_daily"], older_than=0, retain_last=1)
        assert report.totals()["snapshots_expired"] == dry.totals()["snapshots_expired"]
        assert report.totals()["files_removed"] > 0
        table = ws.catalog.load_table(("lakepub", "orders_daily"))
        assert len(table.metadata.snapshots) < 12
        assert _read(ws.published_tables()["orders_daily"]) == before == (1, 105 + 75)
        with pytest.raises(lakepub.UnknownDataset):
            ws.janitor(["nope"])


def test_compact_from_python_rewrites_the_ledger_read_back_by_duckdb(tmp_path: Path):
    with lakepub.Workspace.init(tmp_path / "shop") as ws:
        _batches(ws, 5)
        published_before = _read(ws.published_tables()["orders_daily"])
        ledger = ws.catalog.load_table(("lakepub", "orders_daily__ledger"))
        assert _read(ledger.metadata_location, "SELECT count(*) FROM t") == (10,)
        result = ws.compact("orders_daily")
        assert (result.rows_before, result.rows_after) == (10, 2) and not result.dry_run
        ledger = ws.catalog.load_table(("lakepub", "orders_daily__ledger"))
        rows = _read(ledger.metadata_location, "SELECT count(*), max(version) FROM t")
        assert rows == (2, 5)
        assert _read(ws.published_tables()["orders_daily"]) == published_before
        assert ledger.current_snapshot().snapshot_id == result.snapshot_id  # the compacted ledger
        assert ws.log("orders_daily")[0].source == "(compaction)"
        assert ws.verify("orders_daily", deep=True).ok


# --- docstrings on every public name ----------------------------------------------------------


def _documented(obj) -> bool:
    doc = inspect.getdoc(obj) or ""
    name = getattr(obj, "__name__", "")
    return bool(doc.strip()) and not doc.startswith(f"{name}(")  # not dataclass's generated signature


def _public_members(cls) -> list[tuple[str, object]]:
    out = []
    for name, value in vars(cls).items():
        if name.startswith("_") or name in getattr(cls, "__dataclass_fields__", {}):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if callable(value) or isinstance(value, property) or hasattr(value, "__set_name__"):
            out.append((name, value.fget if isinstance(value, property) else getattr(value, "func", value)))
    return out


def test_every_public_name_has_a_docstring():
    from lakepub.maintenance.compact import CompactionResult
    from lakepub.maintenance.janitor import JanitorReport, TableReport
    from lakepub.reports import DatasetStatus, LandingStatus, LogEntry, VerifyReport
    from lakepub.store.record import Counts

    assert _documented(lakepub)
    missing = [name for name in lakepub.__all__ if not _documented(getattr(lakepub, name))]
    classes = [lakepub.Workspace, lakepub.RunResult, lakepub.PublishResult, DatasetStatus, LandingStatus,
               LogEntry, VerifyReport, JanitorReport, TableReport, CompactionResult, Counts,
               *(getattr(lakepub, n) for n in lakepub.__all__ if isinstance(getattr(lakepub, n), type))]
    for cls in classes:
        missing += [f"{cls.__name__}.{name}" for name, member in _public_members(cls) if not _documented(member)]
    assert not missing, missing
    for name in ("open", "init", "close", "publish", "run", "status", "log", "verify", "janitor", "compact",
                 "connect", "query", "published_tables", "committed_positions"):
        assert hasattr(lakepub.Workspace, name), name


def test_the_workspace_docstring_examples_name_real_methods():
    text = inspect.getdoc(lakepub)
    for method in ("open", "init", "publish", "run", "query", "janitor", "compact"):
        assert f".{method}(" in text and hasattr(lakepub.Workspace, method)
    assert json.loads(json.dumps(lakepub.__all__)) == lakepub.__all__


def test_python_callers_get_the_publish_records_through_logging(tmp_path: Path, caplog):
    import logging

    with lakepub.Workspace.init(tmp_path / "shop") as ws, caplog.at_level(logging.INFO, logger="lakepub"):
        logging.getLogger("lakepub").propagate = True  # as in a process where the CLI never ran
        result = ws.publish("orders_daily", [A1, A2], start={"p0": 0}, end={"p0": 2})
    # pytest may hold its capture handler on both "lakepub" and the root logger: count records once
    published = list({id(r): r for r in caplog.records if getattr(r, "event", None) == "published"}.values())
    assert len(published) == 1 and published[0].snapshot_id == result.snapshot_id
    assert published[0].batch_id == result.batch_id and published[0].dataset == "orders_daily"
