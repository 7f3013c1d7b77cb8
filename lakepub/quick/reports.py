"""``lakepub log`` and ``lakepub status`` on the quick path: the same records as ``lakepub.reports``
(``report_rows``), built from the catalog row and the metadata JSON.

``log`` needs nothing else: every figure it prints is in the snapshot summaries
(``store/record.py``'s walk of the lineage, run here over ``QuickTable``).

``status`` also prints figures only a scan gives (rows, partitions, measure totals: DuckDB over
the published files) and the refused batches (a scan of the audit table). Those are functions of
the published table's metadata file, the audit table's metadata file and the configuration, all
immutable or stamped: the full path stores each dataset's status in
``.lakepub/quick/status/<dataset>.json`` under the key (configuration stamp, table metadata
location, audit metadata location), and the quick path takes it only when the key is the
current one. What moves without a commit is recomputed every time, as the full path does: the
landing backlog (segment counts, the same rule as ``landing.count_records``) and the freshness
verdict (``contract/freshness.evaluate`` at ``now``). So the first ``status`` after a publish takes
the full path and the next ones the quick one.
"""

from __future__ import annotations

import time
from dataclasses import fields as dataclass_fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lakepub.maintenance.durations import grace_end_ms
from lakepub.positions import valid_name
from lakepub.quick.catalog import QuickTable, QuickWorkspace, Unsupported, retirement, write_json
from lakepub.report_rows import DatasetStatus, LandingStatus, LogEntry, log_entries
from lakepub.store.record import Counts, published_history

AUDIT_TABLE = "lakepub_audit"  # store/audit.py
STATUS_DIR = Path(".lakepub") / "quick" / "status"
# Bump when reports.status computes a stored figure differently (stored ones then go unused); a
# field added to or removed from DatasetStatus is noticed by itself.
STATUS_FORMAT = 1


def log(qw: QuickWorkspace, dataset: str, limit: int | None) -> list[LogEntry]:
    """``reports.log`` over the metadata JSON."""
    if dataset not in qw.datasets and dataset not in qw.derived:
        raise Unsupported("unknown dataset")  # the full path raises the error
    table = qw.table(dataset)
    if table is None:
        return []
    return log_entries(published_history(table), limit)  # type: ignore[arg-type] - QuickTable walks the same


# --- status ----------------------------------------------------------------------------------------


def _key(qw: QuickWorkspace, table: QuickTable | None) -> list[Any]:
    """(configuration stamp, the published table's metadata location, the audit table's)."""
    published = table is not None and table.metadata.current_snapshot_id is not None
    return [qw.record["fingerprint"], table.metadata_location if published else None,  # type: ignore[union-attr]
            qw.metadata_location(AUDIT_TABLE)]


def remember_status(ws: Any, status: DatasetStatus, spec: Any, stamp: str | None, audit_before: str | None) -> None:
    """Store a status the full path computed (``landing`` and ``freshness`` are recomputed on use).

    Its key must name what it was computed on, even if a publish or a refused batch lands
    meanwhile: the table's location is the one the status read (``status.metadata_location``),
    the audit table's is the one read before the status (``audit_before``) and kept only if it is
    still the current one, and the configuration stamp is the one taken before the configuration
    was loaded (``remember`` keeps the record only if it still matches)."""
    try:
        qw = QuickWorkspace.open(ws.config.root)
        try:
            key = [stamp, status.metadata_location if status.published else None, audit_before]
            if stamp != qw.record["fingerprint"] or qw.metadata_location(AUDIT_TABLE) != audit_before:
                return
        finally:
            qw.close()
        doc = {"format": STATUS_FORMAT, "key": key, "source": spec.source, "landing": str(ws.config.landing_dir(spec.source, None)),
               "freshness": spec.contract.terms.freshness, "status": status.as_dict()}
        write_json(qw.root / STATUS_DIR / f"{status.dataset}.json", doc)
    except Exception:  # noqa: BLE001 - not remembered: the full path runs next time
        pass


def status(qw: QuickWorkspace, dataset: str, now: datetime | None) -> DatasetStatus:
    """``reports.status`` from the stored figures, if they are the current ones."""
    if dataset not in qw.datasets or not valid_name(dataset):
        raise Unsupported("unknown dataset")
    import json

    try:
        doc = json.loads((qw.root / STATUS_DIR / f"{dataset}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise Unsupported("no stored status") from None
    table = qw.table(dataset)
    if doc.get("format") != STATUS_FORMAT or doc.get("key") != _key(qw, table):
        raise Unsupported("stored status is not the current one")
    fields = dict(doc["status"])
    if set(fields) != {f.name for f in dataclass_fields(DatasetStatus)}:
        raise Unsupported("stored by another version of DatasetStatus")
    fields["totals"] = Counts(**fields["totals"])
    committed = fields["positions"].get(doc["source"], {})
    fields["landing"] = _landing(Path(doc["landing"]), committed)
    if doc["freshness"]:
        from lakepub.contract.freshness import evaluate

        times = [s.timestamp_ms for s, _ in published_history(table)] if table is not None else []  # type: ignore[arg-type]
        fields["freshness"] = evaluate(doc["freshness"], times, now or datetime.now(timezone.utc)).as_dict()
    return DatasetStatus(**fields)


def retired(qw: QuickWorkspace, dataset: str) -> tuple[str, int, float] | None:
    """``retirement.retirement_of``: (state, at_ms, grace_s) of a retired dataset, else None."""
    return retirement(qw.table(dataset))


def retirement_note(qw: QuickWorkspace, s: DatasetStatus) -> DatasetStatus:
    """``retirement.retirement_note``."""
    from dataclasses import replace

    found = retired(qw, s.dataset)
    if found is None:
        return s
    state, at_ms, grace_s = found
    note = (f"retired since {_iso_z(at_ms)} ({state}): hidden from queries and listings, skipped by run; "
            f"'lakepub restore {s.dataset}' undoes it until {_iso_z(_delete_after(at_ms, grace_s))}")
    return replace(s, note=f"{note}; {s.note}" if s.note else note)


def _delete_after(at_ms: int, grace_s: float) -> int:
    """``Retirement.delete_after_ms`` (an unreadable record's infinite grace: the full path's answer)."""
    if grace_s != grace_s or grace_s in (float("inf"), float("-inf")):
        raise Unsupported("retirement record without a finite grace")
    return grace_end_ms(at_ms, grace_s)


def _iso_z(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


# --- the landing backlog (landing.py's LandingSource.backlog, stdlib only) ------------------------


def _landing(folder: Path, committed: dict[str, int]) -> LandingStatus | None:
    if not folder.is_dir():
        return None
    now = time.time()
    pending, available = {}, {}
    oldest: tuple[float, Path] | None = None
    mtimes: dict[str, float] = {}
    names = sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not all(valid_name(n) for n in names):
        raise Unsupported("invalid partition folder")  # the full path's error
    for part in names:
        offset, total, first_pending = committed.get(part, 0), 0, None
        segments = sorted(p for p in (folder / part).glob("*.jsonl") if not p.name.startswith("."))
        for i, seg in enumerate(segments):
            n = _records(seg, last=i == len(segments) - 1)
            if first_pending is None and total + n > offset:
                first_pending = seg
            total += n
        if first_pending is not None:
            mtime = mtimes[part] = first_pending.stat().st_mtime
            if oldest is None or mtime < oldest[0]:
                oldest = (mtime, first_pending)
        available[part] = total
        pending[part] = max(0, total - offset)
    missing = {p: committed[p] for p in committed if committed[p] > available.get(p, 0)}
    return LandingStatus(str(folder), sum(pending.values()), str(oldest[1]) if oldest else None,
                         now - oldest[0] if oldest else None, missing, pending, available,
                         {p: now - m for p, m in mtimes.items()})


_BLANK_AFTER_NEWLINE = (b"\n\n", b"\n\r", b"\n ", b"\n\t")


def _records(path: Path, last: bool) -> int:
    """``landing.count_records(path).complete(last)[0]``: non-blank newline-terminated lines, plus
    an unterminated non-blank tail unless the segment is its partition's newest."""
    data = path.read_bytes()
    size = data.rfind(b"\n") + 1
    tail = bool(data[size:].strip())
    if not size:
        records = 0
    elif data[0] not in b"\n\r \t" and not any(data.find(p, 0, size) >= 0 for p in _BLANK_AFTER_NEWLINE):
        records = data.count(b"\n", 0, size)
    else:
        records = sum(1 for line in data[:size].split(b"\n") if line.strip())
    return records if last or not tail else records + 1
