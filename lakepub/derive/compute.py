"""One window of a derived dataset: computed by DuckDB, committed through the atomic commit.

``compute_window(ctx, D, labels)``:

1. loads each input's published table (the catalog's pointer, now) and computes the window's
   input fingerprints from *that* table's recorded checksums, so what is recorded is what was read;
2. runs the query in DuckDB, sandboxed (``duck.sandboxed``: it can read the inputs' table
   folders and no other file), with each input a view over its published snapshot (``views.py``:
   its data files as Parquet), a partitioned input filtered to the rows whose ``t(col)`` falls in
   the window (``col >= start AND col < end`` per calendar span, or ``col IN (...)``);
3. refuses (exit 3, nothing written) rows outside the window's partitions: the query moved rows
   across partitions, so its input expressions do not say what a partition reads;
4. groups the rows by partition and checksums every partition from one sort (``output.py``);
   the data files are written by DuckDB (``store/duck_files.py``: ``COPY ... PARTITION_BY``
   with the Iceberg field ids, registered from their footers with the statistics pyiceberg
   records, ``store/footer_stats.py``) or, for a schema it does not cover (float/double,
   nested, a remote warehouse), by ``store/files.py``. ``prepare_window`` stops here: nothing is committed yet;
5. ``commit_window`` replaces exactly the window's partitions in ONE snapshot (an overwrite
   through ``store/write.py``; a window that replaces no file, as in a full build, appends a
   manifest of its own instead of rewriting every live entry), recording the data version, each
   partition's input fingerprint and checksum (a partition left empty records the empty
   checksum), and commits it with ``commit_atomically`` (SQL catalogs) or the catalog's own
   commit, which both assert the table did not move since it was loaded. A lost race (another
   window of the same dataset committed first) reloads the table and stages the same files
   again on it: windows are disjoint, so that is a rebase, not a recomputation.

The ``*`` window (a dataset whose inputs are all ``all``) replaces every partition.

Cost (``scripts/bench/derive.py``): the query over the window's input rows, one DuckDB
``COPY`` of its partitions, a footer read per file, one manifest and one catalog commit per
window; a full build of a 365-partition daily rollup is one window by default.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lakepub.derive.state import (EMPTY_CHECKSUM, PARTITIONS_PROPERTY, PARTS_PROPERTY, WHOLE, WINDOW_PROPERTY, Context, fingerprint,
                                  foreign_change, label_range, schema_mismatch)
from lakepub.errors import BlockedError, CommitContention

MAX_ATTEMPTS = 12
NULL_LABEL = "null"  # Iceberg's human string of a null partition value


class WindowRefused(BlockedError):
    """A window cannot be computed or committed as asked; nothing was written."""


@dataclass(frozen=True)
class WindowResult:
    dataset: str
    window: str
    partitions: list[str]
    rows: int
    snapshot_id: int
    attempts: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "window": self.window, "partitions": self.partitions, "rows": self.rows,
                "snapshot_id": self.snapshot_id, "attempts": self.attempts, "seconds": round(self.seconds, 3)}


@dataclass
class Prepared:
    """A window computed and its files written, not yet committed (``prepare_window``)."""

    name: str
    labels: list[str]
    window_id: str
    into: str | None
    rows: int
    prints: dict[str, str]
    checksums: dict[str, str]
    nonempty: set[str]
    files: list
    started: float
    table: Any = None  # the target table as loaded when the files were written


def compute_window(ctx: Context, name: str, labels: list[str], window_id: str = "",
                   into: str | None = None) -> WindowResult:
    """Compute and commit output partitions ``labels`` of derived dataset ``name`` (into its
    published table, or into table ``into``: an offline rebuild's, ``rebuild.py``)."""
    return commit_window(ctx, prepare_window(ctx, name, labels, window_id, into), reuse=True)


def prepare_window(ctx: Context, name: str, labels: list[str], window_id: str = "",
                   into: str | None = None) -> Prepared:
    """Steps 1-3 and the window's data files (see the module docstring); nothing is committed."""
    started = time.perf_counter()
    spec = ctx.graph.derived[name]
    for upstream in spec.inputs:
        ctx.forget(upstream)  # the inputs as published now: what is read is what is recorded
        changed = foreign_change(ctx, upstream)  # rows no record vouches for: refused, as a publish does
        if changed:
            raise WindowRefused(f"{spec.path}: cannot compute {name}: {changed}; nothing was written")
    prints = {label: fingerprint(ctx, spec, label) for label in labels}
    rows = run_query(ctx, name, labels)
    grouped, checksums = _partitions(ctx, name, rows, labels)
    version = ctx.versions[name]
    ctx.forget(into or name)
    if into is not None:
        _check_rebuild_open(ctx, name, into, version.data_version)
    table = ensure_table(ctx, name, into)
    mismatch = schema_mismatch(ctx, name, table)
    if mismatch:
        raise WindowRefused(f"{spec.path}: {mismatch}; nothing was written")
    # Written once: a lost race stages the same files again on the table as it now is (same
    # schema and partition spec, checked on every attempt).
    from lakepub.store import duck_files

    distinct = len(set(grouped.labels)) == len(grouped.labels)
    if grouped.rows.num_rows and distinct and duck_files.supported(table.metadata, grouped.rows.column_names):
        files = duck_files.done(duck_files.write_partitions(table.metadata, grouped.rows, grouped.index,
                                                            grouped.values, grouped.labels))
    else:
        from pyiceberg.typedef import Record

        from lakepub.store.files import FileWriter

        # One file per group, not a dict by value: 0.0 == -0.0 as keys, and -0.0's rows replaced 0.0's.
        partitioned = bool(table.metadata.spec().fields)
        files = FileWriter(table.metadata, table.io).submit(
            [(Record(v) if partitioned else Record(), grouped.part(i)) for i, v in enumerate(grouped.values)])
    return Prepared(name, labels, window_id, into, rows.num_rows, prints, checksums, set(grouped.labels), files,
                    started, table)


def commit_window(ctx: Context, prepared: Prepared, reuse: bool = False) -> WindowResult:
    """Commit a prepared window (step 4), rebasing on windows that committed since (``ctx`` may
    be another thread's than the one that prepared it: the files only need the table's schema,
    partition spec and location, which are checked on every attempt). ``reuse``: stage the first
    attempt on the table as the window loaded it (prepared just now, in this thread), instead of
    loading it again; a table that moved meanwhile loses the commit race and is reloaded."""
    p = prepared
    name, labels, into = p.name, p.labels, p.into
    spec = ctx.graph.derived[name]
    version = ctx.versions[name]
    target = into or name
    table = p.table if reuse and p.table is not None else _reload(ctx, name, into, version.data_version)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        mismatch = schema_mismatch(ctx, name, table) or _other_version(table, version.data_version)
        if mismatch:
            raise WindowRefused(f"{spec.path}: {mismatch}; nothing was written")
        snapshot_id = _try_commit(ctx, table, name, labels, p.nonempty, p.files, p.checksums, p.prints, version,
                                  p.window_id, attempt)
        if snapshot_id is not None:
            ctx.forget(target)
            return WindowResult(name, p.window_id, labels, p.rows, snapshot_id, attempt,
                                time.perf_counter() - p.started)
        time.sleep(min(1.0, 0.02 * 2 ** attempt))
        table = _reload(ctx, name, into, version.data_version)
    raise CommitContention(f"gave up committing window {p.window_id or labels[0]} of {name} after {MAX_ATTEMPTS} "
                           "attempts: other writers kept moving the table; retry")


def _reload(ctx: Context, name: str, into: str | None, data_version: str):
    """The window's target table loaded afresh (a rebuild's still checked open); refused if dropped."""
    target = into or name
    ctx.forget(target)
    if into is not None:
        _check_rebuild_open(ctx, name, into, data_version)
    table = ctx.table(target)
    if table is None:
        raise WindowRefused(f"{target} was dropped while a window of {name} was computed; nothing was written: "
                            "run 'lakepub reconcile' again")
    return table


def _check_rebuild_open(ctx: Context, name: str, into: str, data_version: str) -> None:
    """Refuse a window into rebuild table ``into`` once that rebuild was swapped in (by another
    process: a job runner's window planned before the swap): the rebuild's catalog entry is gone
    and re-creating it would put a stray table in the folder the published table now lives in."""
    if ctx.table(into) is not None:
        return
    from lakepub.store.record import latest_record

    ctx.forget(name)
    published = ctx.table(name)
    record = latest_record(published) if published is not None and published.metadata.current_snapshot_id \
        is not None else None
    if record is not None and record.data_version == data_version:
        raise WindowRefused(f"the rebuild {into} of {name} was swapped in meanwhile (it is published at this data "
                            "version); nothing was written: run 'lakepub plan' or 'lakepub reconcile' again")


def _other_version(table, data_version: str) -> str | None:
    """Why a window of ``data_version`` cannot go into ``table``: its newest record is another
    data version (a process with another definition rebuilt and swapped it meanwhile). A table
    holds one data version; a new one is only ever built offline and swapped in whole."""
    from lakepub.store.record import latest_record

    record = latest_record(table) if table.metadata.current_snapshot_id is not None else None
    if record is None or record.data_version in (None, data_version):
        return None
    return (f"{table.name()[-1]} is at data version {record.data_version[:19]}, this window's definition gives "
            f"{data_version[:19]} (the definition changed while it ran): run 'lakepub reconcile' again with the "
            "current definition")


def run_query(ctx: Context, name: str, labels: list[str]) -> pa.Table:
    """The query's rows for the window, read from the inputs' published snapshots."""
    import duckdb

    from lakepub import duck, views

    spec = ctx.graph.derived[name]
    schema = ctx.resolved[name].schema
    cache = ctx.ws.config.root / ".lakepub" / "views"
    # Sandboxed like `lakepub query`: the query can read the inputs' table folders and nothing else.
    folders = duck.sandbox_directories(ctx.ws.config.catalog.get("warehouse"),
                                       [ctx.table(u).metadata_location for u in spec.inputs])
    con = duck.sandboxed(ctx.ws.config.catalog, folders)
    try:
        for upstream, inp in spec.inputs.items():
            source = views.resolve(ctx.table(upstream), cache).table_sql()
            where = "" if inp.expr is None or labels == [WHOLE] else \
                f" WHERE {_filter(inp.expr, labels, _column_type(ctx, upstream, inp.expr.column))}"
            con.execute(f"CREATE OR REPLACE TEMP VIEW {duck.name(upstream)} AS SELECT * FROM {source}{where}")
        try:
            result = con.execute(spec.query).to_arrow_table()
        except duckdb.Error as exc:
            raise WindowRefused(f"{spec.path}: 'projection.query' failed on window {labels[0]}..{labels[-1]}: "
                                f"{' '.join(str(exc).split())[:300]}") from None
    finally:
        con.close()
    return result.select(schema.names).cast(schema)


def _column_type(ctx: Context, dataset: str, column: str) -> pa.DataType:
    spec = ctx.graph.base.get(dataset)
    schema = spec.kind.output_schema() if spec is not None else ctx.resolved[dataset].schema
    return schema.field(column).type


def _literal(day, arrow: pa.DataType) -> str:
    """A day boundary as a literal of the column's type: timestamps at UTC midnight, as Iceberg's
    day/month/year transforms cut them (whatever DuckDB's session time zone)."""
    if pa.types.is_timestamp(arrow) and arrow.tz is not None:
        return f"TIMESTAMPTZ '{day.isoformat()} 00:00:00+00'"
    if pa.types.is_timestamp(arrow):
        return f"TIMESTAMP '{day.isoformat()} 00:00:00'"
    return f"DATE '{day.isoformat()}'"


def _filter(expr, labels: list[str], arrow: pa.DataType) -> str:
    from lakepub import duck

    column = duck.name(expr.column)
    terms = [f"{column} IS NULL"] if NULL_LABEL in labels else []  # the partition of null values
    labels = [label for label in labels if label != NULL_LABEL]
    if expr.kind == "identity":
        if labels:
            # Compared as values of the column's type, not as strings: a label is Iceberg's human
            # string (a float 0.1 is '0.10000000149011612'), not DuckDB's CAST(... AS VARCHAR) ('0.1').
            from lakepub.projection.partitioning import iceberg_type
            from lakepub.views import _duck_type

            duck_type = _duck_type(iceberg_type(arrow)) or "VARCHAR"
            values = ", ".join(f"CAST('{label.replace(chr(39), chr(39) * 2)}' AS {duck_type})" for label in labels)
            terms.append(f"{column} IN ({values})")
        return "(" + " OR ".join(terms or ["FALSE"]) + ")"
    spans: list[list] = []
    for label in labels:  # consecutive partitions merge into one range
        start, end = label_range(expr.kind, label)
        if spans and spans[-1][1] == start:
            spans[-1][1] = end
        else:
            spans.append([start, end])
    terms += [f"({column} >= {_literal(s, arrow)} AND {column} < {_literal(e, arrow)})" for s, e in spans]
    return "(" + " OR ".join(terms or ["FALSE"]) + ")"


def _partitions(ctx: Context, name: str, rows: pa.Table, labels: list[str]):
    """The rows grouped by partition (``derive/output.py``) and the checksum of every window partition."""
    from lakepub.derive.output import group
    from lakepub.identity import RECORDED_CHECKSUM_HEX

    spec = ctx.graph.derived[name]
    grouped = group(rows, spec.partition)
    if labels != [WHOLE]:
        outside = sorted(set(grouped.labels) - set(labels))
        if outside:
            raise WindowRefused(
                f"{spec.path}: the query put rows in partition {outside[0]} while computing {labels[0]}..{labels[-1]} "
                f"from the input rows of those partitions: its 'projection.inputs' expressions must say which input "
                "rows each output partition reads; nothing was written")
    wanted = labels if labels != [WHOLE] else sorted(grouped.labels)
    checksums = {label: grouped.checksums[label][:RECORDED_CHECKSUM_HEX] if label in grouped.checksums
                 else EMPTY_CHECKSUM for label in wanted}
    return grouped, checksums


def ensure_table(ctx: Context, name: str, into: str | None = None):
    """The derived dataset's published table (or its rebuild table ``into``), created on its first window."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    from lakepub.projection.partitioning import iceberg_type
    from lakepub.store.catalog import create_or_load, ensure_namespace
    from lakepub.store.layout import TABLE_PROPERTIES, summary_id
    from lakepub.store.published import DEFINITION_PROPERTY

    table = ctx.table(into or name)
    if table is not None and (table.metadata.current_snapshot_id is not None or not schema_mismatch(ctx, name, table)):
        return table
    spec = ctx.graph.derived[name]
    schema = Schema(*[NestedField(i, f.name, iceberg_type(f.type), required=False)
                      for i, f in enumerate(ctx.resolved[name].schema, start=1)])
    props = {**TABLE_PROPERTIES, "write.metadata.metrics.default": "none",
             DEFINITION_PROPERTY: json.dumps({"kind": "sql", "query": spec.normalized_sql,
                                              "partition": str(spec.partition)}, sort_keys=True)}
    for column in spec.partition.columns:
        props[f"write.metadata.metrics.column.{column}"] = "full"
    ident = summary_id(ctx.ws.config.namespace, into or name)
    catalog = ctx.ws.catalog
    if table is not None:  # created by a run that crashed before its first window, for other columns
        catalog.drop_table(ident)
    ensure_namespace(catalog, ctx.ws.config.namespace)
    # The table create_table returns (or the one a concurrent writer created, loaded) is the one
    # in the catalog now: remembered as loaded, not loaded once more (~2-3 ms per build).
    return ctx.remember(into or name, create_or_load(catalog, ident, lambda: catalog.create_table(
        ident, schema=schema, partition_spec=spec.partition.iceberg_spec(schema), properties=props)))


def _try_commit(ctx: Context, table, name: str, labels: list[str], nonempty: set[str], files: list,
                checksums: dict[str, str], prints: dict[str, str], version, window_id: str,
                attempt: int = 1) -> int | None:
    """Stage the window on ``table`` as loaded and commit; the new snapshot id, or None on a lost race."""
    from lakepub.store.commit import CommitConflict, TableChange, commit_atomically, commit_in_order, commit_mode
    from lakepub.store.record import COMMIT_ATTEMPTS, Counts, PublishRecord
    from lakepub.store.write import replace_partitions, transaction

    spec = ctx.graph.derived[name]
    whole = labels == [WHOLE]
    from lakepub.store.duck_files import live_files

    current = live_files(table)
    label_of = {}
    for f in current:
        label_of[f.file_path] = spec.partition.label(f.partition[0] if len(f.partition) else None)
    wanted = set(labels)
    old = [f for f in current if whole or label_of[f.file_path] in wanted]
    kept = {label_of[f.file_path] for f in current if not (whole or label_of[f.file_path] in wanted)}
    if whole:  # a partition the query no longer produces is recorded empty
        checksums = {**{label: EMPTY_CHECKSUM for label in set(label_of.values())}, **checksums}
    record = PublishRecord(
        batch_id="derive-" + uuid.uuid4().hex,
        batch={"kind": "derive", "source": "(reconcile)", "window": window_id, "first": labels[0], "last": labels[-1]},
        positions={}, contract="", schema_id=table.metadata.current_schema_id, checksums=checksums,
        counts=Counts(partitions_rewritten=len(checksums)), totals=Counts(), partition_count=len(kept | nonempty),
        data_version=version.data_version,
        extra={PARTITIONS_PROPERTY: json.dumps(prints, sort_keys=True),
               PARTS_PROPERTY: json.dumps(version.parts(), sort_keys=True), WINDOW_PROPERTY: window_id,
               COMMIT_ATTEMPTS: str(attempt)},
    )
    props = record.to_properties()
    tx = transaction(table)
    if old:
        replace_partitions(tx, table, old, files, props)
    elif files:
        from lakepub.store.duck_files import fast_append

        fast_append(tx, files, props)
    else:
        tx.append(ctx.resolved[name].schema.empty_table(), snapshot_properties=props)
    try:
        if commit_mode(ctx.ws.catalog, ctx.ws.config.commit) == "atomic":
            commit_atomically(ctx.ws.catalog, [TableChange(table, tx)])
        else:
            commit_in_order(ctx.ws.catalog, [TableChange(table, tx)])
    except CommitConflict:
        return None
    return tx.table_metadata.current_snapshot_id
