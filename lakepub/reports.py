"""Read-side reports: status, publish log and verification of published partitions.

Functions of a ``Workspace`` (which calls them): this module does not import the workspace, so
the two do not import each other."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc

from lakepub import duck
from lakepub.errors import VerifyFailed
from lakepub.landing import LandingSource
from lakepub.store import audit, key_index
from lakepub.store.integrity import check_scannable
from lakepub.store.key_index import KeyIndex
from lakepub.contract.model import Contract
from lakepub.contract.orders import ORDERS_CONTRACT
from lakepub.publish.guards import describe, partition_count_mismatches, partition_mismatches
from lakepub.projection.partitioning import PartitionBy
from lakepub.publish.states import live_states
from lakepub.store.layout import columns_at, has_history, ledger_id
from lakepub.store.published import partition_of
from lakepub import report_rows
from lakepub.report_rows import DatasetStatus, LandingStatus, LogEntry, iso, log_entries
from lakepub.store.record import Counts, foreign_head, latest_published, latest_record, published_history, recorded_checksums

if TYPE_CHECKING:  # the workspace calls these reports; they only use the one it passes
    from lakepub.workspace import Workspace


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of ``lakepub verify``: partitions checked and any mismatches."""

    dataset: str
    snapshot_id: int | None
    partitions_checked: int
    mismatches: list[str]
    deep: bool

    @property
    def ok(self) -> bool:
        """True when every checked partition matches its recorded checksum."""
        return not self.mismatches

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form (``lakepub verify --format json``)."""
        return {**asdict(self), "ok": self.ok}


def status(ws: Workspace, dataset: str, *, landing: str | None = None, now: datetime | None = None) -> DatasetStatus:
    spec = ws.dataset(dataset)
    table = ws._summary_table(dataset)  # noqa: SLF001 - same package
    refused = _refused_counts(ws, dataset)
    snapshot = table.current_snapshot() if table is not None else None
    fresh = _freshness(spec.contract, table, now)
    if snapshot is None:
        return DatasetStatus(dataset, spec.contract.schema_ref, False, landing=_landing(ws, dataset, {}, landing),
                             freshness=fresh, **refused)
    history = next(published_history(table), None)
    record = history[1] if history else None
    measures = [m.name for m in getattr(spec.kind, "measures", [])]
    partition = PartitionBy.parse(partition_of(table) or str(spec.partition), str(spec.path))  # the table's spec
    con = duck.connect(ws.config.catalog)
    try:
        sums = "".join(f", sum({_ident(m)})" for m in measures)
        if partition.kind == "none":
            n_rows, *totals = con.execute(f"SELECT count(*){sums} FROM {_scan(table)}").fetchone()
            n_partitions = 1 if n_rows else 0
        else:
            parts = partition.values(con.execute(
                f"SELECT {_ident(partition.column)} FROM {_scan(table)}").to_arrow_table())
            n_partitions = len(pc.unique(parts))
            n_rows, *totals = con.execute(f"SELECT count(*){sums} FROM {_scan(table, checked=True)}").fetchone()
    finally:
        con.close()
    foreign = foreign_head(table)
    positions = record.positions if record else {}
    return DatasetStatus(
        dataset=dataset,
        contract=record.contract if record else spec.contract.schema_ref,
        published=True,
        snapshot_id=snapshot.snapshot_id,
        published_at=_iso(snapshot.timestamp_ms),
        last_batch_id=record.batch_id if record else None,
        positions=positions,
        kind=spec.kind.name,
        rows=int(n_rows),
        partitions=n_partitions,
        measures={m: _plain(t) for m, t in zip(measures, totals)},
        **_orders_compat(spec, int(n_rows), dict(zip(measures, totals))),
        totals=record.totals if record else Counts(),
        landing=_landing(ws, dataset, positions.get(spec.source, {}), landing),
        note=(f"current {describe(foreign)}; positions and totals are those of lakepub's last publish "
              "('lakepub verify' checks its data)") if foreign is not None else None,
        metadata_location=table.metadata_location,
        freshness=fresh,
        **refused,
    )


def _freshness(contract: Contract, table, now: datetime | None) -> dict[str, object] | None:
    if not contract.terms.freshness:
        return None
    from lakepub.contract.freshness import evaluate

    times = [s.timestamp_ms for s, _ in published_history(table)] if table is not None else []
    return evaluate(contract.terms.freshness, times, now or datetime.now(timezone.utc)).as_dict()


def log(ws: Workspace, dataset: str, limit: int | None = None) -> list[LogEntry]:
    table = ws._summary_table(dataset)  # noqa: SLF001
    if table is None:
        return []
    return log_entries(published_history(table), limit)


def verify(ws: Workspace, dataset: str, *, deep: bool = False) -> VerifyReport:
    """Recompute each published partition's checksum and compare it with the one recorded when it
    was last rewritten. With ``deep``, also recompute the whole table from the ledger."""
    spec = ws.dataset(dataset)
    table = ws._summary_table(dataset)  # noqa: SLF001
    if table is None or table.current_snapshot() is None:
        return VerifyReport(dataset, None, 0, [], deep)
    published = partition_of(table)  # the table's real spec, whatever the definition says now
    schema = spec.kind.output_schema()
    con = duck.connect(ws.config.catalog)
    try:
        rows = con.execute(f"SELECT * FROM {_scan(table)}").to_arrow_table()
        if published is None:
            checked, mismatches = 0, [f"the partition spec of the published table was changed outside lakepub "
                                      f"({table.metadata.spec()})"]
        else:
            rows = rows.select(schema.names).cast(_as_held(schema, table)) if set(schema.names) <= set(rows.column_names) \
                else rows
            partition = PartitionBy.parse(published, str(spec.path))
            checked, mismatches = partition_mismatches(recorded_checksums(table), rows, partition)
            mismatches += partition_count_mismatches(latest_published(table), rows, partition)
        foreign = foreign_head(table)
        if foreign is not None and mismatches:
            mismatches = [f"current {describe(foreign)} and changed the published data: {m}" for m in mismatches]
        if deep:
            mismatches += _deep_check(ws, spec, con, rows)
    finally:
        con.close()
    return VerifyReport(dataset, table.current_snapshot().snapshot_id, checked, mismatches, deep)


def raise_if_failed(report: VerifyReport) -> None:
    if not report.ok:
        raise VerifyFailed(f"verify {report.dataset}: {len(report.mismatches)} mismatch(es): {report.mismatches[0]}")


def _as_held(schema: pa.Schema, table) -> pa.Schema:
    """``schema`` with the floating-point types the table holds: a float column a pending
    compatible version promotes to double is still floats, checksummed as such (0.1f renders
    ``0.1``, as a double ``0.10000000149011612``) until the publish that evolves the table."""
    held = {f.name: f.type for f in table.schema().as_arrow()}
    return pa.schema([f.with_type(held[f.name]) if pa.types.is_floating(f.type) and f.name in held
                      and pa.types.is_floating(held[f.name]) else f for f in schema])


def _deep_check(ws: Workspace, spec, con, rows: pa.Table) -> list[str]:
    """The published rows equal the dataset rebuilt from the ledger's live states."""
    group = ws.config.group(spec.name)
    ledger = ws.catalog.load_table(ledger_id(ws.config.namespace, group.name))
    snapshot_id = _published_ledger_snapshot(ws, spec.name, ledger)
    check_scannable(ledger, snapshot_id) if snapshot_id is not None else None
    want = spec.kind.build(live_states(con, ledger, snapshot_id, spec.contract))
    for f in want.schema:  # a column a compatible contract adds before its first publish: null until then
        if f.name not in rows.column_names:
            rows = rows.append_column(f.name, pa.nulls(rows.num_rows, f.type))
    have = rows.select(want.column_names).cast(want.schema) if rows.num_rows else want.slice(0, 0)
    want_rows, have_rows = _multiset(want), _multiset(have)
    diffs = [f"row {r}: published {have_rows.get(r, 0)} time(s) but the ledger gives {want_rows.get(r, 0)}"
             for r in sorted(set(want_rows) | set(have_rows), key=repr) if want_rows.get(r, 0) != have_rows.get(r, 0)]
    if snapshot_id is None:
        return diffs
    return diffs[:20] + _index_check(con, ledger, snapshot_id, spec.contract, ws.file_cache)


def _multiset(table: pa.Table) -> dict[tuple, int]:
    out: dict[tuple, int] = {}
    for row in zip(*(table.column(n).to_pylist() for n in table.column_names)):
        out[row] = out.get(row, 0) + 1
    return out


def _orders_compat(spec, rows: int, totals: dict[str, object]) -> dict[str, object]:
    """``days``, ``live_orders`` and ``cents`` for the original orders projection (scripts read them)."""
    if spec.kind.describe() != {**LEGACY_DESCRIBE, "partition": spec.kind.describe().get("partition")}:
        return {}
    return {"days": rows, "live_orders": int(totals.get("orders") or 0), "cents": int(totals.get("cents") or 0)}


LEGACY_DESCRIBE = {"kind": "aggregate", "group_by": ["day"], "measures": {"cents": "sum(cents)", "orders": "count()"}}


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _plain(value: object) -> object:
    """A measure total for JSON: ints stay ints, decimals become strings."""
    return value if isinstance(value, (int, float)) or value is None else str(value)


def _index_check(con, ledger, snapshot_id: int, contract: Contract = ORDERS_CONTRACT, cache=None) -> list[str]:
    """The key-index runs the ledger snapshot names hold exactly its rows (store/key_index.py),
    compared as (k1, version, state fields, low k2, floor) multisets (on an object store: the
    runs fetched through the disk ``cache``, store/cache.py)."""
    from lakepub.store.cache import CachedKeyIndex, remote

    runs = key_index.runs_of(ledger.snapshot_by_id(snapshot_id))
    folder = key_index.folder_of(ledger.location())
    schema = key_index.index_schema(contract)
    index: KeyIndex | None = KeyIndex(folder, schema) if folder is not None else None
    if folder is None and cache is not None and remote(ledger.location()):
        index = CachedKeyIndex(cache, ledger.location(), schema).bind(ledger.io)
    if runs is None or index is None:
        return []
    try:
        if isinstance(index, CachedKeyIndex):
            index.ensure(runs)
        batches = [b for run in runs for b in index.batches(run)]
    except OSError as exc:
        return [f"ledger key index: a run is unreadable ({' '.join(str(exc).split())}); publishes scan the "
                f"ledger instead until `lakepub compact` writes a complete index"]
    con.register("lp_index", pa.concat_tables([key_index.conform(pa.Table.from_batches([b]), schema) for b in batches])
                 if batches else schema.empty_table())  # runs from before an evolution lack its columns
    try:
        state = [duck.name(n) for n in contract.state_names]
        version = duck.name(contract.entity.version)
        index = (f"SELECT k1, version, {', '.join(state)}, k2::BIGINT & 4294967295, "
                 "CASE WHEN compacted THEN version END FROM lp_index")
        scan = _scan(ledger, snapshot_id, checked=True)
        # A snapshot from before a contract evolution lacks the fields it added: null, as the index reads them.
        present, in_history = columns_at(ledger, snapshot_id), columns_at(ledger, snapshot_id, "history")
        names = contract.state_names
        cols = [duck.name(n) if present is None or n in present else f"NULL AS {duck.name(n)}" for n in names]
        hist = [f"h.{duck.name(n)}" if in_history is None or n in in_history else "NULL" for n in names]
        rows = f"SELECT k1, {version}::BIGINT, {', '.join(cols)}, k2 & 4294967295, floor FROM {scan}"
        if has_history(ledger):  # versions compaction dropped are index rows of their own
            rows = (f"SELECT * FROM ({rows} UNION ALL SELECT k1, h.version, {', '.join(hist)}, "
                    f"k2 & 4294967295, NULL::BIGINT FROM (SELECT k1, k2, unnest(history) AS h FROM {scan}))")
        extra, missing = con.execute(f"""
            SELECT (SELECT count(*) FROM ({index} EXCEPT ALL {rows})),
                   (SELECT count(*) FROM ({rows} EXCEPT ALL {index}))""").fetchone()
    finally:
        con.unregister("lp_index")
    if extra or missing:
        return [f"ledger key index ({len(runs)} run(s)): {extra} row(s) not in the ledger, {missing} ledger row(s) "
                "missing; publishes would misread history: `lakepub compact` (atomic commit mode) rebuilds it"]
    return []


def _published_ledger_snapshot(ws: Workspace, dataset: str, ledger) -> int | None:
    """The ledger snapshot recorded by the published snapshot, if still in the ledger's metadata
    (under the ordered commit the ledger's main may hold an unpublished append), else main."""
    record = latest_record(ws._summary_table(dataset))  # noqa: SLF001
    if record is not None and record.ledger_snapshot is not None and ledger.snapshot_by_id(record.ledger_snapshot):
        return record.ledger_snapshot
    return ledger.metadata.current_snapshot_id


def _refused_counts(ws: Workspace, dataset: str) -> dict[str, int]:
    table = audit.audit_table(ws.catalog, ws.config.namespace)
    if table is None or table.metadata.current_snapshot_id is None:
        return {"conflicts": 0, "stale_refused": 0, "gate_refused": 0}
    con = duck.connect(ws.config.catalog)
    try:
        conflicts, stale, gated = con.execute(
            f"SELECT count(*) FILTER (WHERE outcome = 'conflict'), count(*) FILTER (WHERE outcome = 'stale-start'), "
            f"count(*) FILTER (WHERE outcome = 'gate-refused') "
            f"FROM {_scan(table)} WHERE dataset = ?", [ws.config.group(dataset).name]
        ).fetchone()
    finally:
        con.close()
    return {"conflicts": conflicts, "stale_refused": stale, "gate_refused": gated}


def _scan(table, snapshot_id: int | None = None, *, checked: bool = False) -> str:
    """``iceberg_scan`` of a snapshot, after checking that DuckDB can read its manifests
    (``store/integrity.py``: a bad manifest would abort the process)."""
    if not checked:
        check_scannable(table, snapshot_id)
    return duck.scan_sql(table.metadata_location, snapshot_id)


def _landing(ws: Workspace, dataset: str, committed: dict[str, int], override: str | None) -> LandingStatus | None:
    spec = ws.dataset(dataset)
    src = LandingSource(ws.config.landing_dir(spec.source, override), spec.contract)
    if not src.exists():
        return None
    backlog = src.backlog(committed)
    return LandingStatus(str(src.folder), backlog.total_pending,
                         str(backlog.oldest_unprocessed) if backlog.oldest_unprocessed else None, backlog.oldest_age_s,
                         backlog.missing, backlog.pending, backlog.available, backlog.oldest_age_by_partition)


status_text = report_rows.status_text  # the records and their text live in report_rows (light)
_iso = iso  # report_rows.iso: one spelling of commit times for both paths
