"""Shared fixtures: a fresh embedded-default workspace per test, CLI runners, state snapshots."""

from __future__ import annotations

import json
import os
import socket
import uuid
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from lakepub.cli import main
from lakepub.init import init_workspace
from lakepub.store.layout import ledger_id, summary_id
from lakepub.workspace import Workspace

A1 = {"order_id": "A", "version": 1, "day": "2025-10-01", "cents": 100, "deleted": False}
A2 = {"order_id": "A", "version": 2, "day": "2025-10-02", "cents": 150, "deleted": False}
B2 = {"order_id": "B", "version": 2, "day": None, "cents": None, "deleted": True}
B1 = {"order_id": "B", "version": 1, "day": "2025-10-01", "cents": 70, "deleted": False}
SEED_EVENTS = [A1, A2, B2, B1]


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


def write_jsonl(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


@pytest.fixture
def ws_path(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    init_workspace(root)
    return root


@pytest.fixture
def ws(ws_path: Path) -> Workspace:
    return Workspace.open(ws_path)


@pytest.fixture
def cli(ws_path: Path):
    """Run the CLI in-process against the test workspace."""

    def run(*args: str) -> CliResult:
        result = CliRunner().invoke(main, ["-w", str(ws_path), *args], catch_exceptions=False)
        return CliResult(result.exit_code, result.stdout, result.stderr)

    return run


@pytest.fixture
def cli_process(ws_path: Path):
    """Run the CLI as a separate process (needed when it is meant to die)."""

    def run(*args: str, env: dict[str, str] | None = None) -> CliResult:
        proc = subprocess.run(
            [sys.executable, "-m", "lakepub.cli", "-w", str(ws_path), *args],
            capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=120,
        )
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    return run


def published_pointers(ws: Workspace, dataset: str = "orders_daily") -> tuple[str, str]:
    """The catalog's metadata pointers of a dataset's tables: equal pointers = unchanged state."""
    from pyiceberg.exceptions import NoSuchTableError

    catalog = Workspace.open(ws.config.root).catalog
    ns = ws.config.namespace
    out = []
    for ident in (summary_id(ns, dataset), ledger_id(ns, dataset)):
        try:
            out.append(catalog.load_table(ident).metadata_location)
        except NoSuchTableError:
            out.append(None)
    return tuple(out)


def summary_rows(ws: Workspace, dataset: str = "orders_daily") -> list[tuple]:
    fresh = Workspace.open(ws.config.root)
    return [tuple(r.values()) for r in fresh.query(f"SELECT day::VARCHAR, cents, orders FROM {dataset} ORDER BY day").to_pylist()]


def ledger_count(ws: Workspace, dataset: str = "orders_daily") -> int:
    fresh = Workspace.open(ws.config.root)
    table = fresh.catalog.load_table(ledger_id(fresh.config.namespace, dataset))
    return len(table.scan().to_arrow())


# --- catalog backends -------------------------------------------------------------------------

PG_HOST = os.environ.get("LAKEPUB_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("LAKEPUB_TEST_PG_PORT", "5432"))
PG_USER = os.environ.get("LAKEPUB_TEST_PG_USER", "postgres")


def _pg_answers(timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection((PG_HOST, PG_PORT), timeout=timeout):
            return True
    except OSError:
        return False


def _pg_admin():
    import psycopg2

    con = psycopg2.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, dbname="postgres", connect_timeout=5)
    con.autocommit = True  # CREATE/DROP DATABASE cannot run inside a transaction
    return con


@pytest.fixture
def pg_url() -> str:
    """``postgresql+psycopg2://`` URL of a fresh database, dropped (connections terminated) afterwards."""
    if not _pg_answers():
        pytest.skip(f"no PostgreSQL server answers on {PG_HOST}:{PG_PORT}")
    db = f"lakepub_it_{uuid.uuid4().hex[:12]}"
    admin = _pg_admin()
    try:
        with admin.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{db}"')
        yield f"postgresql+psycopg2://{PG_USER}@{PG_HOST}:{PG_PORT}/{db}"
    finally:
        try:
            with admin.cursor() as cur:
                # pyiceberg's SQLAlchemy engines keep pooled connections open: end them first.
                cur.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                    (db,),
                )
                cur.execute(f'DROP DATABASE IF EXISTS "{db}"')
        finally:
            admin.close()


def set_catalog(root: Path, **catalog: str) -> None:
    """Rewrite the workspace's catalog mapping."""
    import yaml

    path = root / "lakepub.yaml"
    config = yaml.safe_load(path.read_text())
    config["catalog"] = {"name": "lakepub", **catalog}
    path.write_text(yaml.safe_dump(config))


def set_commit_mode(root: Path, mode: str) -> None:
    import yaml

    path = root / "lakepub.yaml"
    config = yaml.safe_load(path.read_text())
    config["commit"] = mode
    path.write_text(yaml.safe_dump(config))


@pytest.fixture(params=["sqlite", "sqlite-ordered", pytest.param("postgres", marks=pytest.mark.integration)])
def backend_ws(request, ws_path: Path) -> Workspace:
    """A workspace on the embedded SQLite catalog (atomic commit, or the ordered commit that
    non-SQL catalogs use), or on a PostgreSQL catalog."""
    if request.param == "postgres":
        url = request.getfixturevalue("pg_url")
        set_catalog(ws_path, type="sql", uri=url, warehouse=".lakepub/warehouse")
    if request.param == "sqlite-ordered":
        set_commit_mode(ws_path, "ordered")
    return Workspace.open(ws_path)


# --- writers started together -----------------------------------------------------------------

_TOGETHER_WORKER = """
import json, sys
from lakepub.workspace import Workspace
root, source, path = sys.argv[1], sys.argv[2], sys.argv[3]
batches = json.load(open(path))
ws = Workspace.open(root)  # reads lakepub.yaml only: the catalog opens on the first publish
print("ready", flush=True)
sys.stdin.read(1)          # the barrier: the parent writes one byte to every worker at once
offset = 0
for batch in batches:
    ws.publish("orders_daily", batch, source=source, start={"p0": offset}, end={"p0": offset + len(batch)})
    offset += len(batch)
"""


def publish_together(root: Path, plan: dict[str, list[list[dict]]], tmp_path: Path) -> list[CliResult]:
    """One process per source of ``plan`` ({source: batches}), all released at the same instant
    once every one has imported lakepub and read the workspace; returns their results."""
    procs = []
    for source, batches in plan.items():
        path = tmp_path / f"{source}.batches.json"
        path.write_text(json.dumps(batches))
        procs.append(subprocess.Popen([sys.executable, "-c", _TOGETHER_WORKER, str(root), source, str(path)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    for proc in procs:  # every worker has imported lakepub and read the workspace ...
        assert proc.stdout.readline().strip() == "ready", proc.communicate(timeout=60)
    for proc in procs:  # ... and blocks in read(1) until its byte arrives
        proc.stdin.write("g")
        proc.stdin.flush()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        results.append(CliResult(proc.returncode, out, err))
    return results
