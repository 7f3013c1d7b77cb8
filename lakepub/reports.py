"""Read-side reports: status, publish log and verification of published partitions."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timezone

import pyarrow as pa

from lakepub import duck, output
from lakepub.errors import VerifyFailed
from lakepub.landing import LandingSource
from lakepub.store import audit, key_index
from lakepub.store.integrity import check_scannable
from lakepub.store.key_index import KeyIndex
from lakepub.publish.guards import describe, partition_count_mismatches, partition_mismatches
from lakepub.store.layout import grain_of, has_history, ledger_id, partition_label
from lakepub.store.record import Counts, foreign_head, latest_published, latest_record, published_history, recorded_checksums
from lakepub.workspace import Workspace


@dataclass(frozen=True)
class LandingStatus:
    folder: str
    pending: int
    oldest_unprocessed: str | None
    oldest_age_s: float | None
    missing: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class DatasetStatus:
    dataset: str
    contract: str
    published: bool
    snapshot_id: int | None = None
    published_at: str | None = None
    last_batch_id: str | None = None
    positions: dict[str, dict[str, int]] = field(default_factory=dict)
    partitions: int = 0
    days: int = 0
    live_orders: int = 0
    cents: int = 0
    totals: Counts = field(default_factory=Counts)
    conflicts: int = 0
    stale_refused: int = 0
    landing: LandingStatus | None = None
    note: str | None = None  # e.g. the current snapshot was written outside lakepub
    metadata_location: str | None = None  # the catalog's: what an outside reader should open

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class LogEntry:
    snapshot_id: int
    committed_at: str
    batch_id: str
    source: str
    start: dict[str, int]
    end: dict[str, int]
    counts: Counts
    partitions: list[str]

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class VerifyReport:
    dataset: str
    snapshot_id: int | None
    partitions_checked: int
    mismatches: list[str]
    deep: bool

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "ok": self.ok}


def status(ws: Workspace, dataset: str, *, landing: str | None = None) -> DatasetStatus:
    spec = ws.dataset(dataset)
    table = ws._summary_table(dataset)  # noqa: SLF001 - same package
    refused = _refused_counts(ws, dataset)
    snapshot = table.current_snapshot() if table is not None else None
    if snapshot is None:
        return DatasetStatus(dataset, spec.contract.schema_ref, False, landing=_landing(ws, dataset, {}, landing), **refused)
    history = next(published_history(table), None)
    record = history[1] if history else None
    con = duck.connect(ws.config.catalog)
    try:  # one row per day: small enough to total in Python from a single scan
        rows = con.execute(f"SELECT day, cents, orders FROM {_scan(table)}").fetchall()
    finally:
        con.close()
    days, cents, orders = len(rows), sum(r[1] for r in rows), sum(r[2] for r in rows)
    partitions = {partition_label(d, grain_of(table) or spec.partition) for d, _, _ in rows}
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
        partitions=len(partitions),
        days=days,
        live_orders=int(orders),
        cents=int(cents),
        totals=record.totals if record else Counts(),
        landing=_landing(ws, dataset, positions.get(spec.source, {}), landing),
        note=(f"current {describe(foreign)}; positions and totals are those of lakepub's last publish "
              "('lakepub verify' checks its data)") if foreign is not None else None,
        metadata_location=table.metadata_location,
        **refused,
    )


def log(ws: Workspace, dataset: str, limit: int | None = None) -> list[LogEntry]:
    table = ws._summary_table(dataset)  # noqa: SLF001
    if table is None:
        return []
    out = []
    for snapshot, record in published_history(table):
        out.append(LogEntry(
            snapshot_id=snapshot.snapshot_id,
            committed_at=_iso(snapshot.timestamp_ms),
            batch_id=record.batch_id,
            source=str(record.batch.get("source", "")),
            start=dict(record.batch.get("start", {})),  # type: ignore[arg-type]
            end=dict(record.batch.get("end", {})),  # type: ignore[arg-type]
            counts=record.counts,
            partitions=sorted(record.checksums),
        ))
        if limit is not None and len(out) >= limit:
            break
    return out


def verify(ws: Workspace, dataset: str, *, deep: bool = False) -> VerifyReport:
    """Recompute each published partition's checksum and compare it with the one recorded when it
    was last rewritten, and the number of non-empty partitions with the newest record's. With ``deep``, also recompute the whole table from the ledger."""
    spec = ws.dataset(dataset)
    table = ws._summary_table(dataset)  # noqa: SLF001
    if table is None or table.current_snapshot() is None:
        return VerifyReport(dataset, None, 0, [], deep)
    grain = grain_of(table)  # the table's real spec, whatever the definition says now
    con = duck.connect(ws.config.catalog)
    try:
        rows = con.execute(f"SELECT day, cents, orders FROM {_scan(table)}").fetchall()
        if grain is None:
            checked, mismatches = 0, [f"the partition spec of the published table was changed outside lakepub "
                                      f"({table.metadata.spec()})"]
        else:
            checked, mismatches = partition_mismatches(recorded_checksums(table), rows, grain)
            mismatches += partition_count_mismatches(latest_published(table), rows, grain)
        foreign = foreign_head(table)
        if foreign is not None and mismatches:
            mismatches = [f"current {describe(foreign)} and changed the published data: {m}" for m in mismatches]
        if deep:
            mismatches += _deep_check(ws, dataset, con, rows)
    finally:
        con.close()
    return VerifyReport(dataset, table.current_snapshot().snapshot_id, checked, mismatches, deep)


def raise_if_failed(report: VerifyReport) -> None:
    if not report.ok:
        raise VerifyFailed(f"verify {report.dataset}: {len(report.mismatches)} mismatch(es): {report.mismatches[0]}")


def _deep_check(ws: Workspace, dataset: str, con, rows: list[tuple[date, int, int]]) -> list[str]:
    ledger = ws.catalog.load_table(ledger_id(ws.config.namespace, dataset))
    snapshot_id = _published_ledger_snapshot(ws, dataset, ledger)
    if snapshot_id is None:
        return [f"{len(rows)} published day(s) but the ledger is empty"] if rows else []
    expected = con.execute(f"""
        SELECT day, sum(cents)::BIGINT, count(*)::BIGINT FROM (
            SELECT * FROM {_scan(ledger, snapshot_id)}
            QUALIFY row_number() OVER (PARTITION BY order_id ORDER BY version DESC) = 1
        ) WHERE NOT deleted GROUP BY day""").fetchall()
    want = {d: (c, o) for d, c, o in expected}
    have = {d: (c, o) for d, c, o in rows}
    return [f"day {d}: published {have.get(d)} but the ledger gives {want.get(d)}"
            for d in sorted(set(want) | set(have)) if want.get(d) != have.get(d)] + _index_check(con, ledger, snapshot_id)


def _index_check(con, ledger, snapshot_id: int) -> list[str]:
    """The key-index runs the ledger snapshot names hold exactly its rows (store/key_index.py)."""
    runs = key_index.runs_of(ledger.snapshot_by_id(snapshot_id))
    folder = key_index.folder_of(ledger.location())
    if runs is None or folder is None:
        return []
    index = KeyIndex(folder)
    try:
        batches = [b for run in runs for b in index.batches(run)]
    except OSError as exc:
        return [f"ledger key index: a run is unreadable ({' '.join(str(exc).split())}); publishes scan the "
                f"ledger instead until `lakepub compact` writes a complete index"]
    con.register("lp_index", pa.Table.from_batches(batches, schema=key_index.INDEX_SCHEMA))
    try:
        common = "k1, version, day, cents, deleted"
        index = f"SELECT {common}, k2::BIGINT & 4294967295, CASE WHEN compacted THEN version END FROM lp_index"
        scan = _scan(ledger, snapshot_id, checked=True)
        rows = f"SELECT {common}, k2 & 4294967295, floor FROM {scan}"
        if has_history(ledger):  # versions compaction dropped are index rows of their own
            rows = (f"SELECT * FROM ({rows} UNION ALL SELECT k1, h.version, h.day, h.cents, h.deleted, "
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
        return {"conflicts": 0, "stale_refused": 0}
    con = duck.connect(ws.config.catalog)
    try:
        conflicts, stale = con.execute(
            f"SELECT count(*) FILTER (WHERE outcome = 'conflict'), count(*) FILTER (WHERE outcome = 'stale-start') "
            f"FROM {_scan(table)} WHERE dataset = ?", [dataset]
        ).fetchone()
    finally:
        con.close()
    return {"conflicts": conflicts, "stale_refused": stale}


def _scan(table, snapshot_id: int | None = None, *, checked: bool = False) -> str:
    """``iceberg_scan`` of a snapshot, after checking that DuckDB can read its manifests
    (``store/integrity.py``: a bad manifest would abort the process)."""
    if not checked:
        check_scannable(table, snapshot_id)
    return duck.scan_sql(table.metadata_location, snapshot_id)


def _landing(ws: Workspace, dataset: str, committed: dict[str, int], override: str | None) -> LandingStatus | None:
    spec = ws.dataset(dataset)
    src = LandingSource(ws.config.landing_dir(spec.source, override))
    if not src.exists():
        return None
    backlog = src.backlog(committed)
    return LandingStatus(str(src.folder), backlog.total_pending,
                         str(backlog.oldest_unprocessed) if backlog.oldest_unprocessed else None, backlog.oldest_age_s,
                         backlog.missing)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")


def status_text(s: DatasetStatus) -> str:
    lines = [f"{s.dataset}  ({s.contract})"]
    if not s.published:
        lines.append("  not published yet")
    else:
        t = s.totals
        lines += [
            f"  published snapshot  {s.snapshot_id} at {s.published_at} (batch {s.last_batch_id[:12] if s.last_batch_id else '-'})",
            *[f"  position {src:<11} {output.vector(vec)}" for src, vec in sorted(s.positions.items())],
            f"  partitions          {s.partitions} ({s.days} days)",
            f"  live orders         {s.live_orders}   cents {s.cents}",
            f"  events              {t.events} (new versions {t.new_versions}, duplicates {t.duplicates}, "
            f"stale {t.stale}, superseded {t.superseded}, deletes {t.deletes})",
        ]
    if s.note:
        lines.append(f"  note                {s.note}")
    lines.append(f"  refused             conflicts {s.conflicts}, stale starts {s.stale_refused}")
    if s.landing is not None:
        lines.append(f"  landing             {s.landing.pending} unprocessed record(s), oldest "
                     f"{output.human_age(s.landing.oldest_age_s)} ({s.landing.oldest_unprocessed or '-'})")
        if s.landing.missing:
            lines.append(f"  warning             committed offsets {output.vector(s.landing.missing)} are beyond the "
                         f"records in {s.landing.folder} (published from elsewhere, or segments were removed)")
    return "\n".join(lines)
