"""What every published snapshot records in its Iceberg snapshot summary.

The published table's snapshot summary is the checkpoint: it carries the full position vector of
every source, so the data and the positions become visible in the same commit. Keys::

    lakepub.batch-id        batch identity (sha256, see lakepub.identity)
    lakepub.batch           the identity's fields as JSON (dataset, source, start, end, events sha256)
    lakepub.positions       {source: {partition: offset}} after this publish, for every source
    lakepub.contract        schema_ref of the contract the batch was validated against
    lakepub.contract-sha256 sha256 of that contract's canonical form (contract/canonical.py): the
                            label and the content it had (absent in records of older versions)
    lakepub.schema-id       Iceberg schema id of the published table
    lakepub.checksums       {partition: sha256} of each partition this publish rewrote
    lakepub.counts          this batch's counts
    lakepub.totals          running totals of the counts over all publishes
    lakepub.ledger-snapshot the ledger snapshot committed together with this one
    lakepub.partition-count the number of non-empty partitions of the published table after this
                            publish (compaction copies it; absent in records of older versions)
    lakepub.publish-started-ms  when the publish call started (Unix ms): the snapshot's own
                            timestamp (taken once its data files and manifests are written) minus
                            this is the publish's duration (``publish_duration_s``); absent on
                            builds and in records of older versions
    lakepub.commit-attempts commit attempts of this publish (1: no lost race; each lost race is a
                            retry); absent like publish-started-ms
    lakepub.data-version    the data version of the rows this snapshot publishes (``sha256:...``,
                            lakepub/derive/version.py; ``ops/data_version.of_dataset`` reads it);
                            absent in records of older versions

The checksums cover only the partitions a publish rewrote, and the janitor keeps a checksum record
only for partitions present in the current data; the partition count is what still tells that a
partition was removed outside lakepub after its last checksum record was expired.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Iterator, Mapping

from lakepub import positions as pos

if TYPE_CHECKING:  # annotations only: the quick read path (lakepub/quick) reads records without pyiceberg
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

PREFIX = "lakepub."
PUBLISH_STARTED = "lakepub.publish-started-ms"
COMMIT_ATTEMPTS = "lakepub.commit-attempts"
DATA_VERSION = "lakepub.data-version"


@dataclass(frozen=True)
class Counts:
    """Per-batch counters; ``totals`` in a record are sums of these over all publishes."""

    events: int = 0
    new_versions: int = 0
    duplicates: int = 0
    stale: int = 0  # new versions below the version already published: ignored
    superseded: int = 0  # new versions overtaken by a higher version in the same batch
    deletes: int = 0
    entities_changed: int = 0  # recorded as orders_changed before any entity could be published
    partitions_rewritten: int = 0
    rejected: int = 0  # events a lenient publish gate wrote to the rejects table (contract/gates.py)
    inferred_from_schema_default: int = 0  # values filled from a history_only default (not source data)

    def __add__(self, other: "Counts") -> "Counts":
        return Counts(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @classmethod
    def from_json(cls, text: str | None) -> "Counts":
        """Counts from a snapshot summary's JSON (``orders_changed`` of older records included)."""
        raw = json.loads(text) if text else {}
        raw.setdefault("entities_changed", raw.get("orders_changed", 0))
        return cls(**{f.name: int(raw.get(f.name, 0)) for f in fields(cls)})


@dataclass(frozen=True)
class PublishRecord:
    batch_id: str
    batch: dict[str, object]
    positions: dict[str, dict[str, int]]
    contract: str
    schema_id: int
    checksums: dict[str, str]
    counts: Counts
    totals: Counts
    ledger_snapshot: int | None = None
    partition_count: int | None = None  # non-empty partitions after this publish
    contract_sha256: str = ""
    extra: dict[str, str] = field(default_factory=dict)
    data_version: str = ""

    def to_properties(self) -> dict[str, str]:
        props = {
            "lakepub.batch-id": self.batch_id,
            "lakepub.batch": pos.dumps(self.batch),
            "lakepub.positions": pos.dumps(self.positions),
            "lakepub.contract": self.contract,
            "lakepub.schema-id": str(self.schema_id),
            "lakepub.checksums": pos.dumps(self.checksums),
            "lakepub.counts": pos.dumps(asdict(self.counts)),
            "lakepub.totals": pos.dumps(asdict(self.totals)),
        }
        if self.ledger_snapshot is not None:
            props["lakepub.ledger-snapshot"] = str(self.ledger_snapshot)
        if self.partition_count is not None:
            props["lakepub.partition-count"] = str(self.partition_count)
        if self.contract_sha256:
            props["lakepub.contract-sha256"] = self.contract_sha256
        if self.data_version:
            props[DATA_VERSION] = self.data_version
        props.update(self.extra)
        return props

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> "PublishRecord | None":
        if "lakepub.batch-id" not in props:
            return None
        ledger = props.get("lakepub.ledger-snapshot")
        count = props.get("lakepub.partition-count")
        return cls(
            batch_id=props["lakepub.batch-id"],
            batch=json.loads(props.get("lakepub.batch", "{}")),
            positions=json.loads(props.get("lakepub.positions", "{}")),
            contract=props.get("lakepub.contract", ""),
            schema_id=int(props.get("lakepub.schema-id", "0")),
            checksums=json.loads(props.get("lakepub.checksums", "{}")),
            counts=Counts.from_json(props.get("lakepub.counts")),
            totals=Counts.from_json(props.get("lakepub.totals")),
            ledger_snapshot=int(ledger) if ledger else None,
            partition_count=int(count) if count else None,
            contract_sha256=props.get("lakepub.contract-sha256", ""),
            data_version=props.get(DATA_VERSION, ""),
        )


def publish_duration_s(properties: Mapping[str, str], timestamp_ms: int) -> float | None:
    """Seconds from the start of a publish call to its snapshot (the batch's lookup, projection,
    ledger and partition files, manifests; not reading the events before it, nor the pointer swap
    after it), from its snapshot's summary ``properties`` and ``timestamp_ms``; None where the
    start is not recorded."""
    started = properties.get(PUBLISH_STARTED)
    if not started or not started.isdigit():
        return None
    return max(0, timestamp_ms - int(started)) / 1000


def snapshot_record(snapshot: Snapshot | None) -> PublishRecord | None:
    if snapshot is None or snapshot.summary is None:
        return None
    return PublishRecord.from_properties(dict(snapshot.summary.additional_properties))


def lineage(metadata: TableMetadata, snapshot_id: int | None) -> Iterator[Snapshot]:
    """The snapshot and its ancestors still in the metadata, newest first: main's lineage when
    ``snapshot_id`` is main's head.

    Parent pointers are followed while the parent is retained. Where the janitor expired it (or
    expiry cleared the pointer), the walk goes on with the newest retained snapshot older than the
    oldest one reached so far, so expiry leaves gaps but does not cut the walk short. Snapshots
    off the lineage (left behind by a rollback) lie between lineage members by sequence number
    and are never walked: only what is older than the whole walk so far can continue it.
    ``maintenance/expiry.py`` keeps checksum records by this same walk, so the records readers
    find are the ones the janitor keeps.
    """
    snapshots = metadata.snapshots
    by_id = {s.snapshot_id: s for s in snapshots}
    snapshot = by_id.get(snapshot_id) if snapshot_id is not None else None
    seen: set[int] = set()
    oldest: int | None = None  # the lowest sequence number reached
    while snapshot is not None and snapshot.snapshot_id not in seen:
        seen.add(snapshot.snapshot_id)
        oldest = snapshot.sequence_number if oldest is None else min(oldest, snapshot.sequence_number)
        yield snapshot
        parent = by_id.get(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id is not None else None
        if parent is None:  # expired (expiry may also clear the pointer): continue below the gap
            older = [s for s in snapshots if s.sequence_number < oldest]
            parent = max(older, key=lambda s: s.sequence_number, default=None)
        snapshot = parent


def ancestry(table: Table) -> Iterator[Snapshot]:
    """The current snapshot and its ancestors, newest first (``lineage`` of the current snapshot)."""
    return lineage(table.metadata, table.metadata.current_snapshot_id)


def published_history(table: Table) -> Iterator[tuple[Snapshot, PublishRecord]]:
    """Publishes of the published table, newest first (one entry per batch), over its ancestry.

    Snapshots written by other tools (a user's pyiceberg script, an engine's maintenance) carry
    no record and are skipped: the newest record in the ancestry is the checkpoint.
    """
    seen: set[str] = set()
    for snapshot in ancestry(table):
        record = snapshot_record(snapshot)
        if record is not None and record.batch_id not in seen:
            seen.add(record.batch_id)
            yield snapshot, record


def latest_published(table: Table) -> tuple[Snapshot, PublishRecord] | None:
    """The newest lakepub record in the current snapshot's ancestry, and its snapshot: the
    positions, ledger snapshot and totals a publish builds on, even under foreign snapshots."""
    return next(published_history(table), None)


def latest_record(table: Table) -> PublishRecord | None:
    found = latest_published(table)
    return found[1] if found else None


def foreign_head(table: Table) -> Snapshot | None:
    """The current snapshot if another tool wrote it (no lakepub record), else None."""
    current = table.current_snapshot()
    return current if current is not None and snapshot_record(current) is None else None


def recorded_checksums(table: Table) -> dict[str, str]:
    """Per partition label, the checksum recorded by the newest publish that rewrote it."""
    recorded: dict[str, str] = {}
    for _, record in published_history(table):
        for label, checksum in record.checksums.items():
            recorded.setdefault(label, checksum)
    return recorded


def find_batch(table: Table, batch_id: str) -> tuple[Snapshot, PublishRecord] | None:
    for snapshot, record in published_history(table):
        if record.batch_id == batch_id:
            return snapshot, record
    return None
