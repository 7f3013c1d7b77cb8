"""Observed consumers: which columns of which dataset were actually read, by whom, and when last.

Seed 002: a change must be bound to its consumers, and a declared list misses the monthly
finance job and the notebook nobody announced. So every ``lakepub query`` / ``Workspace.query``
and every statement run on a ``Workspace.connect()`` connection is recorded in
``<workspace>/.lakepub/consumers.db`` (SQLite; concurrent processes are fine): its SQL text, the
columns of the views it ran against, the consumer and the interface (``via``), with first/last
seen time and a count. Reading the record (``observed``: ``lakepub consumers``, ``contract
check``) parses each new statement once with sqlglot (DuckDB dialect), qualified against those
columns, so ``SELECT *`` counts as reading every column and a column read through a CTE,
subquery or alias is traced to its dataset; the result is stored beside the statement. A read
of rows only (``count(*)``) is the column ``""``. ``DESCRIBE`` and plain ``EXPLAIN`` read no data;
``SUMMARIZE`` reads every column.

Parsing at read time keeps sqlglot (~0.3 s to import its optimizer) out of the query path. The
consumer is ``$LAKEPUB_CONSUMER`` (a job's name), else the OS user. Recording never fails a
query: any error (a locked or unwritable file) is swallowed (``LAKEPUB_DEBUG=1`` prints it). A
statement already written by this process in the last minute is not written again (the count
undercounts tight loops), and the views' columns are read once per published state. Measured by
``scripts/bench/consumers.py --queries 200`` (1,000 orders; medians of interleaved series on a
shared 2-core machine): a repeated query 0.91-0.97x of ``Workspace.query`` without recording
(within noise), a new SQL text every call 1.04-1.24x (+0.6-2.5 ms: one SQLite upsert).
"""

from __future__ import annotations

import datetime as dt
import functools
import getpass
import hashlib
import json
import os
import re
import sqlite3
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

ROWS_ONLY = ""  # the column recorded for a read of rows only (count(*))
_THROTTLE_S = 60.0
_written: dict[tuple[str, str, str, str], float] = {}
_EXPLAIN_ANALYZE = re.compile(r"^\s*EXPLAIN\s+ANALYZE\s+", re.IGNORECASE)
_TABLE = """CREATE TABLE IF NOT EXISTS statements (
  id TEXT NOT NULL, consumer TEXT NOT NULL, via TEXT NOT NULL, sql TEXT NOT NULL, views TEXT NOT NULL,
  reads TEXT, first_seen TEXT NOT NULL, last_seen TEXT NOT NULL, count INTEGER NOT NULL,
  PRIMARY KEY (id, consumer, via))"""


def store_path(root: Path) -> Path:
    return Path(root) / ".lakepub" / "consumers.db"


@dataclass(frozen=True)
class Read:
    dataset: str
    column: str  # "" = rows only
    consumer: str
    via: str
    first_seen: str
    last_seen: str
    reads: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def consumer_name() -> str:
    name = os.environ.get("LAKEPUB_CONSUMER")
    if name:
        return name
    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment
        return "unknown"


# --- what a statement reads ---------------------------------------------------------------------


def columns_read(sql: str, schema: Mapping[str, Mapping[str, str]]) -> dict[str, set[str]]:
    """{dataset: columns} that ``sql`` reads, for the datasets of ``schema`` ({name: {column: type}})."""
    key = tuple(sorted((t, tuple(sorted(cols.items()))) for t, cols in schema.items()))
    return {t: set(cols) for t, cols in _columns_read(sql, key).items()}


@functools.lru_cache(maxsize=512)
def _columns_read(sql: str, schema_key: tuple) -> dict[str, frozenset[str]]:
    import logging

    import sqlglot
    from sqlglot import exp
    from sqlglot.optimizer.qualify import qualify
    from sqlglot.optimizer.scope import traverse_scope

    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    schema = {t.lower(): {c: ty for c, ty in cols} for t, cols in schema_key}
    names = {t.lower(): t for t, _ in schema_key}
    out: dict[str, set[str]] = {}
    for stmt in sqlglot.parse(_EXPLAIN_ANALYZE.sub("", sql), read="duckdb"):
        if stmt is None or isinstance(stmt, (exp.Describe, exp.Command)):
            continue
        if isinstance(stmt, exp.Summarize):
            table = stmt.find(exp.Table)
            if table is not None and table.name.lower() in schema:
                out.setdefault(names[table.name.lower()], set()).update(schema[table.name.lower()])
            continue
        try:
            stmt = qualify(stmt, schema=schema, dialect="duckdb", validate_qualify_columns=False)
        except Exception:  # unqualifiable (an unknown column): count the tables it names, rows only
            for table in stmt.find_all(exp.Table):
                if table.name.lower() in schema:
                    out.setdefault(names[table.name.lower()], set())
            continue
        for scope in traverse_scope(stmt):
            for source in scope.sources.values():
                if isinstance(source, exp.Table) and source.name.lower() in schema:
                    out.setdefault(names[source.name.lower()], set())
            for column in scope.columns:
                source = scope.sources.get(column.table)
                if isinstance(source, exp.Table) and source.name.lower() in schema:
                    out.setdefault(names[source.name.lower()], set()).add(column.name)
    return {t: frozenset(cols) for t, cols in out.items()}


def view_schema(con: Any, datasets: Iterable[str]) -> dict[str, dict[str, str]]:
    """{dataset: {column: type}} of the temp views a connection has for ``datasets``."""
    wanted = list(datasets)
    if not wanted:
        return {}
    marks = ", ".join("?" for _ in wanted)
    rows = con.execute(f"SELECT table_name, column_name, data_type FROM duckdb_columns() "
                       f"WHERE database_name = 'temp' AND table_name IN ({marks})", wanted).fetchall()
    out: dict[str, dict[str, str]] = {}
    for table, column, dtype in rows:
        out.setdefault(table, {})[column] = dtype
    return out


# --- recording (the query path: no parsing) -----------------------------------------------------


def observe(root: Path, sql: str, schema: Mapping[str, Mapping[str, str]], via: str,
            consumer: str | None = None) -> None:
    """Record that ``sql`` ran against views with ``schema``; never raises."""
    try:
        if schema:
            _record(root, sql, schema, via, consumer or consumer_name())
    except Exception as exc:  # recording is best effort: the query already succeeded
        _debug(exc)


def _debug(exc: Exception) -> None:
    if os.environ.get("LAKEPUB_DEBUG"):
        print(f"lakepub: consumer recording failed: {type(exc).__name__}: {exc}", file=sys.stderr)


_SCHEMAS: dict[tuple[tuple[str, str], ...], dict[str, dict[str, str]]] = {}


def observe_connection(con: Any, root: Path, sql: str, published: Mapping[str, str], via: str) -> None:
    """``observe`` with the columns of ``con``'s views of the ``published`` datasets ({name:
    metadata location}; the columns of one location never change, so they are read once); never raises."""
    key = tuple(sorted(published.items()))
    try:
        schema = _SCHEMAS.get(key)
        if schema is None:
            if len(_SCHEMAS) > 64:  # one entry per published state seen by this process
                _SCHEMAS.clear()
            schema = _SCHEMAS[key] = view_schema(con, published)
    except Exception as exc:
        _debug(exc)
        return
    observe(root, sql, schema, via)


def _record(root: Path, sql: str, schema: Mapping[str, Mapping[str, str]], via: str, consumer: str) -> None:
    views = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    sid = hashlib.sha256(f"{sql}\0{views}".encode("utf-8")).hexdigest()[:32]
    key = (str(root), sid, consumer, via)
    now_mono = time.monotonic()
    if now_mono - _written.get(key, -_THROTTLE_S) < _THROTTLE_S:
        return
    path = store_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    db = sqlite3.connect(path, timeout=1.0)
    try:
        db.execute("PRAGMA synchronous = OFF")  # an observation: losing the last one in a crash is fine
        with db:
            db.execute(_TABLE)
            db.execute("INSERT INTO statements VALUES (?, ?, ?, ?, ?, NULL, ?, ?, 1) ON CONFLICT (id, consumer, via) "
                       "DO UPDATE SET last_seen = excluded.last_seen, count = count + 1",
                       (sid, consumer, via, sql, views, now, now))
    finally:
        db.close()
    _written[key] = now_mono


# --- reading the record (parses new statements once) ---------------------------------------------


def observed(root: Path, dataset: str | None = None) -> list[Read]:
    """Recorded reads (of one dataset), by dataset, column, consumer and via."""
    path = store_path(root)
    if not path.is_file():
        return []
    db = sqlite3.connect(path, timeout=5.0)
    try:
        try:
            rows = db.execute("SELECT id, consumer, via, sql, views, reads, first_seen, last_seen, count "
                              "FROM statements").fetchall()
        except sqlite3.OperationalError:  # no table yet
            return []
        parsed = []
        for sid, consumer, via, sql, views, reads, first, last, count in rows:
            if reads is None:
                try:
                    found = columns_read(sql, json.loads(views))
                except Exception:  # sqlglot cannot parse it: it read nothing we can name
                    found = {}
                reads = json.dumps({t: sorted(c) for t, c in found.items()}, sort_keys=True)
                try:
                    with db:
                        db.execute("UPDATE statements SET reads = ? WHERE id = ? AND consumer = ? AND via = ?",
                                   (reads, sid, consumer, via))
                except sqlite3.Error:  # read-only or locked: parsed again next time
                    pass
            parsed.append((json.loads(reads), consumer, via, first, last, count))
    finally:
        db.close()
    merged: dict[tuple[str, str, str, str], list[Any]] = {}
    for reads, consumer, via, first, last, count in parsed:
        for table, columns in reads.items():
            if dataset is not None and table != dataset:
                continue
            for column in columns or [ROWS_ONLY]:
                m = merged.setdefault((table, column, consumer, via), [first, last, 0])
                m[0], m[1], m[2] = min(m[0], first), max(m[1], last), m[2] + count
    return [Read(t, c, who, v, *m) for (t, c, who, v), m in sorted(merged.items())]


class ObservedConnection:
    """A DuckDB connection (``Workspace.connect()``) that records what its statements read.

    ``execute``, ``sql`` and ``query`` are recorded; everything else is the connection's own
    (attribute access is forwarded), so it is used exactly like a ``DuckDBPyConnection``.
    """

    def __init__(self, con: Any, root: Path, datasets: Iterable[str]):
        self._con, self._root, self._datasets = con, root, tuple(datasets)
        self._schema: dict[str, dict[str, str]] | None = None

    def _views(self) -> dict[str, dict[str, str]]:
        """The views' columns, read once, before any user statement (a query on the connection
        afterwards would replace the user's pending result)."""
        if self._schema is None:
            try:
                self._schema = view_schema(self._con, self._datasets) if self._datasets else {}
            except Exception as exc:
                _debug(exc)
                self._schema = {}
        return self._schema

    def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        schema = self._views()
        result = self._con.execute(query, *args, **kwargs)
        if isinstance(query, str) and schema:
            observe(self._root, query, schema, "connect")
        return self if result is self._con else result

    def sql(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        schema = self._views()
        result = self._con.sql(query, *args, **kwargs)
        if isinstance(query, str) and schema:
            observe(self._root, query, schema, "connect")
        return result

    query = sql

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)

    def __enter__(self) -> "ObservedConnection":
        return self

    def __exit__(self, *exc: object) -> None:
        self._con.close()


# --- who a change of a contract field reaches ----------------------------------------------------


def dataset_columns(spec: Any, contract: Any, field: str | None) -> list[str]:
    """The published columns of dataset ``spec`` that depend on contract ``field`` (None: the
    key or every field): group_by / current columns of that name, measures whose expression
    names it; the key, version and deleted flag decide which rows exist, so every column."""
    described = spec.kind.describe()
    measures = described.get("measures", {})
    every = [*described.get("group_by", []), *described.get("key", []), *described.get("columns", []), *measures]
    every = list(dict.fromkeys(every))
    roles = {*contract.entity.key, contract.entity.version, contract.entity.deleted}
    if field is None or field in roles:
        return every
    direct = [c for c in (*described.get("group_by", []), *described.get("key", []), *described.get("columns", []))
              if c == field]
    derived = [m for m, text in measures.items() if re.search(rf"\b{re.escape(field)}\b", str(text))]
    return list(dict.fromkeys(direct + derived))


class Affected:
    """``affected(contract, field)``: the consumers a change of ``field`` reaches, declared
    (the contract's ``consumers:``, other contracts whose ``lineage_bind.consume`` names it, the
    workspace's datasets whose projection reads it) and observed (``consumers.db``)."""

    def __init__(self, root: Path | None, datasets: Mapping[str, Any], contracts: Iterable[Any]):
        self.root, self.datasets, self.contracts = root, datasets, list(contracts)
        self._reads = observed(root) if root is not None else []

    def __call__(self, contract: Any, field: str | None) -> list[str]:
        out: list[str] = []
        for c in contract.terms.consumers:
            if field is None or not c.columns or field in c.columns:
                owner = f", owner {c.owner}" if c.owner else ""
                out.append(f"declared {c.name}{owner}")
        own = {n for n, spec in self.datasets.items() if spec.contract.name == contract.name}
        for other in self.contracts:
            if other.name == contract.name:
                continue
            refs = other.terms.lineage_bind.consume
            if any(ref.split("@")[0] == f"contracts/{contract.name}" for ref in refs):
                out.append(f"declared {other.schema_ref} (lineage_bind.consume)")
            for name in sorted(own.intersection(refs)):
                out.append(f"declared {other.schema_ref} (lineage_bind.consume of dataset {name})")
        for name, spec in sorted(self.datasets.items()):
            if spec.contract.name != contract.name:
                continue
            columns = dataset_columns(spec, contract, field)
            if not columns:
                continue
            out.append(f"dataset {name} ({', '.join(columns)})")
            for r in self._reads:
                if r.dataset == name and (r.column in columns or (field is None and r.column == ROWS_ONLY)):
                    col = r.column or "rows"
                    out.append(f"observed {r.consumer} via {r.via} reads {name}.{col} (last {r.last_seen}, {r.reads}x)")
        return out
