"""The output columns of each derived dataset, and the upstream columns its query reads.

Resolved in graph order (upstreams first), without reading any data: each input is an empty
Arrow table of its dataset's columns (a base dataset's ``Kind.output_schema()``, a derived one's
resolved here), registered in an in-memory DuckDB, and the query runs with ``LIMIT 0``: DuckDB's
own binder checks the columns and gives the published types (``sum(BIGINT)`` is ``HUGEINT``,
published as ``decimal(38,0)``). The columns read come from sqlglot: the query qualified against
the inputs' columns (``*`` expanded), then every column of every scope whose source is an input
table (projections, filters, joins, grouping: all of them shape the result).

Invariants: a query that does not bind over its inputs' columns, an output type lakepub cannot
publish, or a ``partition:`` whose column is not an output column is an exit-2 error naming the
file and key. Where sqlglot cannot qualify a query, or it reads columns it does not name
(``COLUMNS(...)``, ``struct_pack(*)``, a whole row ``to_json(t)``), every column of every input counts as read
(conservative: more data-version changes, never fewer). Every input also "reads" its row set
(the pseudo-column ``*``), whatever columns it reads.

Cost: one DuckDB connection per resolution and one ``LIMIT 0`` query and two sqlglot qualify per
derived dataset (~10 ms each: 1.0 s for 100 datasets), paid once per change of the definitions:
the result is cached in ``.lakepub/derive/resolved.json`` under the sha256 of what it depends on.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from lakepub.derive.model import DerivedSpec, Graph
from lakepub.errors import ConfigError
from lakepub.projection.partitioning import iceberg_type

ROWS = "*"  # the pseudo-column of an input's row set


@dataclass(frozen=True)
class Lineage:
    """A flat query (one SELECT over input tables) split into its row shape and its projections."""

    shape: str  # the query with its select list replaced (normalised SQL): what decides the rows
    shape_reads: frozenset[tuple[str, str]]  # (input, column) read outside the select list
    columns: dict[str, tuple[str, frozenset[tuple[str, str]]]]  # output -> (its expression, what it reads)


@dataclass(frozen=True)
class Resolved:
    schema: pa.Schema  # the published columns
    reads: dict[str, tuple[str, ...]]  # input dataset -> the columns the query reads (with ROWS)
    lineage: Lineage | None = None  # None: not a flat query, every output column depends on everything


def resolve(graph: Graph, cache_dir: Path | None = None) -> dict[str, Resolved]:
    """Every derived dataset's columns and reads (ConfigError naming file and key).

    A pure function of the derived definitions and the base datasets' columns: with
    ``cache_dir`` the result is kept in ``<cache_dir>/resolved.json`` under the sha256 of those,
    so a routine run does not pay DuckDB and sqlglot again (~10 ms per derived dataset)."""
    key = _cache_key(graph)
    cached = _load(cache_dir, key)
    if cached is not None:
        return cached
    out = _resolve(graph)
    _store(cache_dir, key, out)
    return out


_DATABASE: list = []  # one in-memory DuckDB database for the process: a new one costs ~10-13 ms
_DATABASE_LOCK = threading.Lock()


def _connection():
    """A connection of its own (a cursor) to the process's resolution database: the inputs it
    registers are visible to it only, and the queries only ever run as ``SELECT * FROM (q) LIMIT 0``."""
    with _DATABASE_LOCK:
        if not _DATABASE:
            import duckdb

            _DATABASE.append(duckdb.connect(":memory:"))
        return _DATABASE[0].cursor()


def _resolve(graph: Graph) -> dict[str, Resolved]:
    con = _connection()
    schemas: dict[str, pa.Schema] = {n: s.kind.output_schema() for n, s in graph.base.items()}
    out: dict[str, Resolved] = {}
    registered: set[str] = set()
    try:
        for name in graph.order:
            spec = graph.derived[name]
            for upstream in spec.inputs:
                if upstream not in registered:
                    con.register(upstream, schemas[upstream].empty_table())
                    registered.add(upstream)
                expr = spec.inputs[upstream].expr  # its column must be one of the input's, of a type it applies to
                if expr is not None:
                    expr.check(schemas[upstream], f"{spec.path}: 'projection.inputs.{upstream}'")
            schema = _output_schema(con, spec)
            schemas[name] = schema
            columns = {u: schemas[u].names for u in spec.inputs}
            out[name] = Resolved(schema, columns_read(spec, columns), column_lineage(spec, columns, schema.names))
    finally:
        con.close()
    return out


def _output_schema(con, spec: DerivedSpec) -> pa.Schema:
    import duckdb

    try:
        schema = con.execute(f"SELECT * FROM ({spec.query}) AS q LIMIT 0").to_arrow_table().schema
    except duckdb.Error as exc:
        message = " ".join(str(exc).split())
        raise ConfigError(f"{spec.path}: 'projection.query' does not run over its inputs' columns: {message[:300]}") \
            from None
    if len(set(schema.names)) != len(schema.names):
        raise ConfigError(f"{spec.path}: 'projection.query' gives two columns one name ({', '.join(schema.names)}); "
                          "name each output column once (AS name)")
    fields = []
    for f in schema:
        arrow = f.type
        if pa.types.is_large_string(arrow) or pa.types.is_string_view(arrow):
            arrow = pa.string()
        try:
            iceberg_type(arrow)
        except ConfigError:
            raise ConfigError(f"{spec.path}: 'projection.query' gives column '{f.name}' of type {f.type}, which "
                              "lakepub cannot publish; CAST it to a string, integer, decimal, double, boolean, "
                              "date or timestamp") from None
        fields.append(pa.field(f.name, arrow, nullable=True))
    out = pa.schema(fields)
    spec.partition.check(out, f"{spec.path}: 'partition'")
    return out


def columns_read(spec: DerivedSpec, columns: dict[str, list[str]]) -> dict[str, tuple[str, ...]]:
    """{input: the columns of it the query reads, ROWS first}; every column where sqlglot cannot tell."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.optimizer.qualify import qualify
    from sqlglot.optimizer.scope import traverse_scope

    found: dict[str, set[str]] = {name: set() for name in spec.inputs}
    try:
        parsed = sqlglot.parse_one(spec.query, read="duckdb")
        if _reads_implicitly(parsed, columns):
            raise ValueError("columns read without being named")
        tree = qualify(parsed, dialect="duckdb",
                       schema={name: {c: "VARCHAR" for c in cols} for name, cols in columns.items()})
        for scope in traverse_scope(tree):
            for column in scope.columns:
                source = scope.sources.get(column.table)
                if isinstance(source, exp.Table) and source.name in found:
                    found[source.name].add(column.name)
        lower = {name: {c.lower(): c for c in cols} for name, cols in columns.items()}
        for name, cols in found.items():
            unknown = [c for c in cols if c not in lower[name]]
            if unknown:
                raise ValueError(unknown)
            found[name] = {lower[name][c] for c in cols}
    except Exception:  # noqa: BLE001 - conservative: everything counts as read
        found = {name: set(columns[name]) for name in spec.inputs}
    return {name: (ROWS, *sorted(cols)) for name, cols in found.items()}


def _reads_implicitly(tree, columns: dict[str, list[str]]) -> bool:
    """Whether the query reads columns that no column reference names (so every column counts):
    DuckDB's ``COLUMNS(...)``, a ``*`` inside an expression other than ``count(*)``
    (``struct_pack(*)``), or a whole row by its table's name (``to_json(t)``)."""
    from sqlglot import exp

    columns_kind = getattr(exp, "Columns", None)
    if columns_kind is not None and next(tree.find_all(columns_kind), None) is not None:
        return True
    for star in tree.find_all(exp.Star):
        if not isinstance(star.parent, (exp.Select, exp.Column, exp.Count)):
            return True
    names = {c.lower() for cols in columns.values() for c in cols}
    sources = {t.alias_or_name.lower() for t in tree.find_all(exp.Table)} | {n.lower() for n in columns}
    return any(not c.table and c.name.lower() in sources and c.name.lower() not in names
               for c in tree.find_all(exp.Column))


def column_lineage(spec: DerivedSpec, columns: dict[str, list[str]], outputs: list[str]) -> Lineage | None:
    """Which input columns each output column and the row shape read, for a flat query: one
    SELECT (no set operation, CTE or subquery) over input tables, with GROUP BY or without any
    aggregate, no DISTINCT, no set-returning function. None otherwise (conservative)."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.optimizer.qualify import qualify
    from sqlglot.optimizer.scope import build_scope, traverse_scope

    try:
        tree = qualify(sqlglot.parse_one(spec.query, read="duckdb"), dialect="duckdb",
                       schema={name: {c: "VARCHAR" for c in cols} for name, cols in columns.items()})
        if not isinstance(tree, exp.Select) or tree.args.get("distinct") or len(list(traverse_scope(tree))) != 1:
            return None
        root = build_scope(tree)
        if root is None or not all(isinstance(src, exp.Table) for src in root.sources.values()):
            return None
        inputs = {alias: src.name for alias, src in root.sources.items()}
        lower = {name: {c.lower(): c for c in cols} for name, cols in columns.items()}
        grouped = tree.args.get("group") is not None
        projections = tree.expressions
        if any(p.find(exp.Unnest, exp.Explode) for p in projections):
            return None
        if not grouped and any(p.find(exp.AggFunc) and not p.find(exp.Window) for p in projections):
            return None

        def reads(node) -> frozenset[tuple[str, str]]:
            found = set()
            for col in node.find_all(exp.Column):
                name = inputs.get(col.table)
                if name is None or col.name.lower() not in lower[name]:
                    raise ValueError(col.sql())
                found.add((name, lower[name][col.name.lower()]))
            return frozenset(found)

        shape = tree.copy()
        shape.set("expressions", [exp.Literal.number(1)])
        by_name = {p.alias_or_name.lower(): p for p in projections}
        out = {}
        for name in outputs:
            p = by_name.get(name.lower())
            if p is None:
                return None
            out[name] = (p.sql(dialect="duckdb", normalize=True, comments=False), reads(p))
        return Lineage(shape.sql(dialect="duckdb", normalize=True, comments=False), reads(shape), out)
    except Exception:  # noqa: BLE001 - conservative: no lineage
        return None


# --- the cache ----------------------------------------------------------------------------------

CACHE_FORMAT = 4  # 2: column lineage without SQL comments; 3: columns read implicitly; 4: input columns checked


def _cache_key(graph: Graph) -> str:
    doc = {"format": CACHE_FORMAT,
           "base": {n: str(s.kind.output_schema()) for n, s in sorted(graph.base.items())},
           "derived": [[n, graph.derived[n].query, {i: str(v) for i, v in graph.derived[n].inputs.items()},
                        str(graph.derived[n].partition)] for n in graph.order]}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode("utf-8")).hexdigest()


def _load(cache_dir: Path | None, key: str) -> dict[str, Resolved] | None:
    if cache_dir is None:
        return None
    try:
        doc = json.loads((cache_dir / "resolved.json").read_text(encoding="utf-8"))
        if doc.get("key") != key:
            return None
        out = {}
        for name, r in doc["datasets"].items():
            schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(r["schema"])))
            lineage = None
            if r["lineage"] is not None:
                lin = r["lineage"]
                lineage = Lineage(lin["shape"], frozenset(tuple(x) for x in lin["shape_reads"]),
                                  {c: (e, frozenset(tuple(x) for x in reads)) for c, (e, reads) in lin["columns"].items()})
            out[name] = Resolved(schema, {i: tuple(cols) for i, cols in r["reads"].items()}, lineage)
        return out
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
        return None  # no cache, or not one we wrote: resolve again


def _store(cache_dir: Path | None, key: str, resolved: dict[str, Resolved]) -> None:
    if cache_dir is None:
        return
    doc = {"key": key, "datasets": {}}
    for name, r in resolved.items():
        lin = r.lineage
        doc["datasets"][name] = {
            "schema": base64.b64encode(r.schema.serialize().to_pybytes()).decode("ascii"),
            "reads": {i: list(cols) for i, cols in r.reads.items()},
            "lineage": None if lin is None else {
                "shape": lin.shape, "shape_reads": sorted(lin.shape_reads),
                "columns": {c: [e, sorted(reads)] for c, (e, reads) in lin.columns.items()}},
        }
    try:  # best effort, written atomically
        cache_dir.mkdir(parents=True, exist_ok=True)
        temporary = cache_dir / f".resolved.json.{os.getpid()}"
        temporary.write_text(json.dumps(doc), encoding="utf-8")
        os.replace(temporary, cache_dir / "resolved.json")
    except OSError:
        pass
