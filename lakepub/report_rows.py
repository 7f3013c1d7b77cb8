"""What ``lakepub status`` and ``lakepub log`` report: their records and their text.

Light on purpose (stdlib, ``lakepub.output`` and the snapshot-summary record, no pyarrow, DuckDB
or pyiceberg): ``lakepub.reports`` fills these records on the full path, and ``lakepub.quick``
fills the very same records from the catalog row and the metadata JSON, so both paths print
through one renderer here and cannot drift apart (``tests/test_quick.py`` compares them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from lakepub import output
from lakepub.store.record import Counts


@dataclass(frozen=True)
class LandingStatus:
    """The landing backlog of a dataset's source: records pending past the committed position."""

    folder: str
    pending: int
    oldest_unprocessed: str | None
    oldest_age_s: float | None
    missing: dict[str, int] = field(default_factory=dict)
    pending_by_partition: dict[str, int] = field(default_factory=dict)
    available: dict[str, int] = field(default_factory=dict)  # records present, per partition
    oldest_age_by_partition: dict[str, float] = field(default_factory=dict)  # partitions with pending records


@dataclass(frozen=True)
class DatasetStatus:
    """What ``lakepub status`` shows for one dataset (``as_dict()`` is its JSON)."""

    dataset: str
    contract: str
    published: bool
    snapshot_id: int | None = None
    published_at: str | None = None
    last_batch_id: str | None = None
    positions: dict[str, dict[str, int]] = field(default_factory=dict)
    kind: str = ""
    rows: int = 0
    partitions: int = 0
    measures: dict[str, object] = field(default_factory=dict)  # an aggregate's totals per measure
    # The original orders_daily's figures under their names of before (that dataset only).
    days: int | None = None
    live_orders: int | None = None
    cents: int | None = None
    totals: Counts = field(default_factory=Counts)
    conflicts: int = 0
    stale_refused: int = 0
    gate_refused: int = 0  # batches a strict publish gate refused (contract/gates.py)
    freshness: dict[str, object] | None = None  # the contract's freshness promise, judged (contract/freshness.py)
    landing: LandingStatus | None = None
    note: str | None = None  # e.g. the current snapshot was written outside lakepub
    metadata_location: str | None = None  # the catalog's: what an outside reader should open

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form (``lakepub status --format json``)."""
        return asdict(self)


@dataclass(frozen=True)
class LogEntry:
    """One publish in ``lakepub log``: snapshot, commit time, batch identity, counts, partitions."""

    snapshot_id: int
    committed_at: str
    batch_id: str
    source: str
    start: dict[str, int]
    end: dict[str, int]
    counts: Counts
    partitions: list[str]

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form (``lakepub log --format json``)."""
        return asdict(self)


def iso(ms: int) -> str:
    """A snapshot's commit time (epoch ms) as ``status`` and ``log`` print it."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")


def log_entries(history, limit: int | None) -> list[LogEntry]:
    """``lakepub log``'s entries, newest first, from ``store.record.published_history`` pairs
    (snapshot, record): shared by the full path (``reports.log``) and the quick one."""
    out: list[LogEntry] = []
    for snapshot, record in history:
        out.append(LogEntry(
            snapshot_id=snapshot.snapshot_id,
            committed_at=iso(snapshot.timestamp_ms),
            batch_id=record.batch_id,
            source=str(record.batch.get("source", "")),
            start=dict(record.batch.get("start", {})),
            end=dict(record.batch.get("end", {})),
            counts=record.counts,
            partitions=sorted(record.checksums),
        ))
        if limit is not None and len(out) >= limit:
            break
    return out


def log_text(entries: list[LogEntry]) -> str:
    """The table ``lakepub log`` prints."""
    rows = [[e.snapshot_id, e.committed_at, e.batch_id[:12], e.source, output.vector(e.end), e.counts.events,
             e.counts.entities_changed, ",".join(e.partitions) if len(e.partitions) <= 3 else f"{len(e.partitions)} partitions"]
            for e in entries]
    headers = ["snapshot", "committed", "batch", "source", "end", "events", "changed", "rewrote"]
    if any(e.counts.rejected for e in entries):  # publish gates of a lenient contract kept events out
        headers.append("rejected")
        rows = [[*row, e.counts.rejected] for row, e in zip(rows, entries)]
    return output.table(headers, rows)


def status_text(s: DatasetStatus) -> str:
    lines = [f"{s.dataset}  ({s.contract})"]
    if not s.published:
        lines.append("  not published yet")
    else:
        t = s.totals
        lines += [
            f"  published snapshot  {s.snapshot_id} at {s.published_at} (batch {s.last_batch_id[:12] if s.last_batch_id else '-'})",
            *[f"  position {src:<11} {output.vector(vec)}" for src, vec in sorted(s.positions.items())],
            f"  rows                {s.rows} in {s.partitions} partition(s) ({s.kind})",
            *(["  totals              " + "   ".join(f"{m} {v}" for m, v in s.measures.items())] if s.measures else []),
            f"  events              {t.events} (new versions {t.new_versions}, duplicates {t.duplicates}, "
            f"stale {t.stale}, superseded {t.superseded}, deletes {t.deletes})",
            *([f"  gates               rejected {t.rejected} event(s) (in the rejects table), "
               f"{t.inferred_from_schema_default} value(s) inferred from a history_only default"]
              if t.rejected or t.inferred_from_schema_default else []),
        ]
    if s.freshness is not None:
        from lakepub.contract.freshness import Freshness

        lines.append(f"  freshness           {Freshness(**s.freshness).text()}")
    if s.note:
        lines.append(f"  note                {s.note}")
    lines.append(f"  refused             conflicts {s.conflicts}, stale starts {s.stale_refused}"
                 + (f", gate refusals {s.gate_refused}" if s.gate_refused else ""))
    if s.landing is not None:
        lines.append(f"  landing             {s.landing.pending} unprocessed record(s), oldest "
                     f"{output.human_age(s.landing.oldest_age_s)} ({s.landing.oldest_unprocessed or '-'})")
        if s.landing.missing:
            lines.append(f"  warning             committed offsets {output.vector(s.landing.missing)} are beyond the "
                         f"records in {s.landing.folder} (published from elsewhere, or segments were removed)")
    return "\n".join(lines)
