"""What lineage reads: a dataset's retained publishes, its compactions, and the entity's ledger
rows with the batch that wrote each.

The invariant: every fact here comes from what lakepub committed, never from a guess. A publish
is a snapshot carrying a record (``store/record.py``) on the published table's main lineage; its
order is that lineage's order. A ledger row names the batch that wrote it (``batch_id``), so the
input events of a publish are the ledger rows whose ``batch_id`` is its batch id. Compaction
(``maintenance/compact.py``) keeps one row per entity and folds the versions below it into the
row's ``history`` without their batch; so the ledger is read at the published ledger snapshot
*and* at the base snapshot of every compaction that is still retained (the janitor expires it
with the rest of the window), and a version known only from ``history`` has no batch (null).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
from pyiceberg.table import Table

from lakepub import duck
from lakepub.contract.model import Contract
from lakepub.store.integrity import check_scannable
from lakepub.store.record import PublishRecord, latest_record, published_history


@dataclass(frozen=True)
class Publish:
    """One retained publish (a batch, a build of a new dataset, or a compaction) of a dataset."""

    snapshot_id: int
    timestamp_ms: int
    record: PublishRecord
    order: int  # 0 = the oldest retained publish

    @property
    def kind(self) -> str:
        return str(self.record.batch.get("kind", "publish"))

    @property
    def batch_id(self) -> str:
        return self.record.batch_id

    @property
    def committed_at(self) -> str:
        return iso(self.timestamp_ms)

    def identity(self) -> dict[str, Any]:
        """Batch identity and source positions, as ``explain`` and the report show them."""
        batch = self.record.batch
        return {"snapshot_id": self.snapshot_id, "committed_at": self.committed_at, "kind": self.kind,
                "batch_id": self.batch_id, "source": batch.get("source"), "start": batch.get("start"),
                "end": batch.get("end"), "events_sha256": batch.get("events_sha256"),
                "positions": self.record.positions, "counts": asdict(self.record.counts)}


@dataclass(frozen=True)
class Compaction:
    """A ledger compaction, as the published table recorded it (or, once the janitor expired
    that record, as the ledger still shows it: its snapshot's summary, else its ``history``)."""

    snapshot_id: int | None  # the published snapshot that recorded it (None: record expired)
    committed_at: str | None  # None: no record of it is left, only the compacted ledger rows
    ledger_snapshot: int | None  # the compacted ledger snapshot
    base: int | None  # the ledger snapshot it compacted (None if the publish before it is not retained)
    base_retained: bool  # still in the ledger's metadata: its versions keep their batches
    rows_before: int | None
    rows_after: int | None
    order: int  # its place in the publish history (0 = the oldest retained; -1 = its record expired)
    timestamp_ms: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def describe(self) -> str:
        when = f"on {self.committed_at}" if self.committed_at else "at a date no record keeps any more"
        rows = f", {self.rows_before} -> {self.rows_after} ledger rows" if self.rows_before is not None else ""
        where = f" (compaction snapshot {self.snapshot_id}{rows})" if self.snapshot_id else (f" ({rows[2:]})" if rows else "")
        base = f"ledger snapshot {self.base}" if self.base is not None else "the compaction"
        return f"versions before {base} were compacted {when}{where}"


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")


def publishes(table: Table) -> list[Publish]:
    """The dataset's retained publishes, newest first (``store.record.published_history``)."""
    found = list(published_history(table))
    n = len(found)
    return [Publish(s.snapshot_id, s.timestamp_ms, r, n - 1 - i) for i, (s, r) in enumerate(found)]


def compactions(history: list[Publish], ledger: Table) -> list[Compaction]:
    """The compactions in ``history`` (newest first), each with the ledger snapshot it compacted:
    the one named by the publish just before it. A compacted ledger (``history`` column) whose
    compaction record the janitor expired gives one entry from the ledger snapshot that still
    says so (``lakepub.compaction`` in its summary), else one without a date."""
    out = []
    for i, p in enumerate(history):
        if p.kind != "compaction":
            continue
        before = _compacted_from(ledger, p.record.ledger_snapshot)
        if before is None and i + 1 < len(history):  # the compacted snapshot expired: the publish before
            before = history[i + 1].record.ledger_snapshot
        retained = before is not None and ledger.snapshot_by_id(before) is not None
        out.append(Compaction(p.snapshot_id, p.committed_at, p.record.ledger_snapshot, before, retained,
                              int(p.record.batch.get("rows_before", 0)), int(p.record.batch.get("rows_after", 0)),
                              p.order, p.timestamp_ms))
    if out or "history" not in ledger.schema().column_names:
        return out
    marked = [s for s in ledger.metadata.snapshots
              if s.summary is not None and "lakepub.compaction" in s.summary.additional_properties]
    if marked:
        newest = max(marked, key=lambda s: s.sequence_number)
        before, _, after = newest.summary.additional_properties["lakepub.compaction"].partition("->")
        return [Compaction(None, iso(newest.timestamp_ms), newest.snapshot_id, None, False,
                           int(before) if before.isdigit() else None, int(after) if after.isdigit() else None, -1,
                           newest.timestamp_ms)]
    return [Compaction(None, None, None, None, False, None, None, -1)]


def _compacted_from(ledger: Table, compacted: int | None) -> int | None:
    """The ledger snapshot a compaction started from: the first ancestor of the compacted
    snapshot that compaction did not write (its delete and append carry ``lakepub.compaction``)."""
    snapshot = ledger.snapshot_by_id(compacted) if compacted is not None else None
    while snapshot is not None:
        props = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        if "lakepub.compaction" not in props:
            return snapshot.snapshot_id
        parent = snapshot.parent_snapshot_id
        snapshot = ledger.snapshot_by_id(parent) if parent is not None else None
    return None  # expired on the way: the base is not known from the ledger


def partition_labels(partition, rows: pa.Table) -> pa.Array:
    """``PartitionBy.label`` of every row's partition value, computed once per distinct value
    (Iceberg's ``to_human_string`` costs ~30 µs a call: per row it dominated ``explain``)."""
    import pyarrow.compute as pc

    if rows.num_rows == 0:
        return pa.array([], pa.string())
    encoded = pc.dictionary_encode(partition.values(rows))
    distinct = [partition.label(v) for v in encoded.dictionary.to_pylist()] + [partition.label(None)]
    indices = pc.fill_null(encoded.indices, len(distinct) - 1)
    return pa.array(distinct, pa.string()).take(indices)


def published_ledger_snapshot(table: Table, ledger: Table) -> int | None:
    """The ledger snapshot the published table names (retained), else the ledger's main."""
    record = latest_record(table)
    if record is not None and record.ledger_snapshot is not None and ledger.snapshot_by_id(record.ledger_snapshot):
        return record.ledger_snapshot
    return ledger.metadata.current_snapshot_id


def ledger_rows(con, ledger: Table, contract: Contract, snapshot_ids: list[int]) -> pa.Table:
    """Every (key, version) the ledger snapshots hold, with its state fields and ``batch_id``
    (null for a version known only from a compacted row's ``history``); one row per (key,
    version), with its batch where any of the snapshots still names it."""
    entity = contract.entity
    names = [*entity.key, entity.version, *contract.state_names]
    schema = pa.schema([contract.arrow_schema.field(n) for n in names]).append(pa.field("batch_id", pa.string()))
    parts = []
    for snapshot_id in dict.fromkeys(s for s in snapshot_ids if s is not None):
        check_scannable(ledger, snapshot_id)
        scan = duck.scan_sql(ledger.metadata_location, snapshot_id)
        columns = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {scan}").fetchall()}
        cols = ", ".join(duck.name(n) for n in names)
        parts.append(f"SELECT {cols}, batch_id FROM {scan}")
        if "history" in columns:
            keys = ", ".join(duck.name(k) for k in entity.key)
            state = ", ".join(f"h.{duck.name(n)}" for n in contract.state_names)
            parts.append(f"SELECT {keys}, h.version, {state}, NULL::VARCHAR FROM "
                         f"(SELECT {keys}, unnest(history) AS h FROM {scan})")
    if not parts:
        return schema.empty_table()
    group = ", ".join(duck.name(n) for n in (*entity.key, entity.version))
    rest = ", ".join(f"any_value({duck.name(n)}) AS {duck.name(n)}" for n in contract.state_names)
    sql = (f"SELECT {group}, {rest}{', ' if rest else ''}max(batch_id) AS batch_id "
           f"FROM ({' UNION ALL '.join(parts)}) GROUP BY ALL")
    rows = con.execute(sql).to_arrow_table()
    return rows.select(schema.names).cast(schema)
