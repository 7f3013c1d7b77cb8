"""``lakepub state DATASET``: what a scheduler or reader needs to know about a published dataset.

The state is read from the catalog's metadata only (no data file is opened): the table's current
snapshot and the lakepub records in its ancestry (``store/record.py``). Its JSON shape is versioned
(``state_version``, now 1: keys are only ever added within a version; a removed or retyped key
bumps it) and pinned by ``tests/test_sensors.py``::

    state_version      1
    dataset            name
    readiness          "published" | "never-published" | "retired" | "deleting" | "foreign-head"
    fingerprint        the published snapshot id (the table's current snapshot; null before the first publish)
    lakepub_snapshot_id the newest snapshot lakepub wrote (differs from fingerprint under a foreign head)
    data_version       of that snapshot: its recorded ``lakepub.data-version``, or ``ops/data_version.py``'s
    last_publish_at    ISO 8601 UTC of that snapshot (and last_publish_ms, Unix ms)
    positions          {source: {partition: offset}} committed
    partitions         [{partition, checksum, data_version, snapshot_id, published_at, empty}] per
                       partition ever published, from the newest publish that rewrote it
    partition_count    non-empty partitions after the newest publish (null in old records)
    retired            null, or {state, at, at_ms, grace_s, delete_after} (the last two null when
                       the retirement record cannot be read: never hard-deleted)
    metadata_location  what an outside reader opens
    note               why readiness is not "published", or null

Readiness: ``never-published`` (no table or no snapshot), ``retired``/``deleting`` (soft-deleted,
``retirement.py``; the data is still there; also for a table retired before any snapshot), ``foreign-head`` (the current snapshot was written by
another tool: the positions and checksums are those of lakepub's last publish, and the next
publish checks the data and may refuse it, see README "Other tools writing to the published
table"), else ``published``. A partition's data version is that of the snapshot that last
rewrote it, so after a definition change the partitions not yet rebuilt still show the old one.

Cost: one catalog load and a walk over the retained snapshots' summaries (no manifest read):
a few ms for a table with a few hundred snapshots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lakepub.lifecycle.retirement import iso, retirement_of
from lakepub.store.record import foreign_head, published_history

STATE_VERSION = 1
DATA_VERSION_PROPERTY = "lakepub.data-version"  # recorded by every published snapshot (issue 14)


@dataclass(frozen=True)
class PartitionState:
    partition: str
    checksum: str
    data_version: str | None
    snapshot_id: int
    published_at: str
    empty: bool

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class DatasetState:
    dataset: str
    readiness: str
    fingerprint: int | None = None
    lakepub_snapshot_id: int | None = None
    data_version: str | None = None
    last_publish_at: str | None = None
    last_publish_ms: int | None = None
    positions: dict[str, dict[str, int]] = field(default_factory=dict)
    partitions: list[PartitionState] = field(default_factory=list)
    partition_count: int | None = None
    retired: dict[str, Any] | None = None
    metadata_location: str | None = None
    note: str | None = None

    def partition(self, label: str) -> PartitionState | None:
        return next((p for p in self.partitions if p.partition == label), None)

    def as_dict(self) -> dict[str, Any]:
        return {"state_version": STATE_VERSION, "dataset": self.dataset, "readiness": self.readiness,
                "fingerprint": self.fingerprint, "lakepub_snapshot_id": self.lakepub_snapshot_id,
                "data_version": self.data_version, "last_publish_at": self.last_publish_at,
                "last_publish_ms": self.last_publish_ms, "positions": self.positions,
                "partitions": [p.as_dict() for p in self.partitions], "partition_count": self.partition_count,
                "retired": self.retired, "metadata_location": self.metadata_location, "note": self.note}


def dataset_state(ws, dataset: str) -> DatasetState:
    """The state of ``dataset`` now (UnknownDataset, exit 2, for a name not defined)."""
    spec = ws.config.definition(dataset)
    table = ws._summary_table(dataset)  # noqa: SLF001 - the workspace's loader
    retirement = retirement_of(table)
    retired = retirement.as_dict() if retirement else None
    if table is None or table.metadata.current_snapshot_id is None:
        if retirement is not None:  # a table created, never published, then retired: retired first
            return DatasetState(dataset, retirement.state, retired=retired, metadata_location=table.metadata_location,
                                note=_retired_note(dataset, retirement) + "; never published")
        return DatasetState(dataset, "never-published", retired=retired,
                            metadata_location=table.metadata_location if table is not None else None,
                            note=f"no published snapshot yet; run 'lakepub run {dataset}' or 'lakepub publish'")
    history = list(published_history(table))
    empty = _empty_checksum(spec)
    versions: dict[int, str | None] = {}

    def version_of(snapshot, record) -> str | None:
        if snapshot.snapshot_id not in versions:
            versions[snapshot.snapshot_id] = data_version_of(table, spec, snapshot, record)
        return versions[snapshot.snapshot_id]

    from lakepub.projection.checksum import is_empty  # v1 (a prefix of ``empty``) or v2 (zero)

    partitions: dict[str, PartitionState] = {}
    for snapshot, record in history:
        for label, checksum in record.checksums.items():
            if label not in partitions:
                partitions[label] = PartitionState(
                    label, checksum, version_of(snapshot, record), snapshot.snapshot_id, iso(snapshot.timestamp_ms),
                    empty is not None and is_empty(checksum, empty))
    newest = history[0] if history else None
    foreign = foreign_head(table)
    readiness, note = "published", None
    if retirement is not None:
        readiness, note = retirement.state, _retired_note(dataset, retirement)
    elif foreign is not None:
        readiness = "foreign-head"
        note = (f"the current snapshot {foreign.snapshot_id} was written by another tool; positions and checksums "
                "are those of lakepub's last publish ('lakepub verify' checks the data)")
    return DatasetState(
        dataset, readiness,
        fingerprint=table.metadata.current_snapshot_id,
        lakepub_snapshot_id=newest[0].snapshot_id if newest else None,
        data_version=version_of(*newest) if newest else None,
        last_publish_at=iso(newest[0].timestamp_ms) if newest else None,
        last_publish_ms=newest[0].timestamp_ms if newest else None,
        positions=newest[1].positions if newest else {},
        partitions=sorted(partitions.values(), key=lambda p: p.partition),
        partition_count=newest[1].partition_count if newest else None,
        retired=retired, metadata_location=table.metadata_location, note=note,
    )


def _retired_note(dataset: str, retirement) -> str:
    if retirement.state == "retired":
        return (f"retired since {iso(retirement.at_ms)}: hidden from queries and listings, skipped by run; "
                f"'lakepub restore {dataset}' undoes it")
    return "the janitor is hard-deleting it"


def data_version_of(table, spec, snapshot, record) -> str | None:
    """The data version a published snapshot recorded, or (records without one) the interim one
    of ``ops/data_version.py`` for that snapshot's contract."""
    from lakepub.ops.data_version import of_dataset

    recorded = (snapshot.summary.additional_properties if snapshot.summary is not None else {}).get(DATA_VERSION_PROPERTY)
    return recorded or of_dataset(table, spec, record)


def _empty_checksum(spec) -> str | None:
    """The checksum of an empty partition of the dataset's kind (a partition emptied by deletes;
    a derived dataset records ``derive.state.EMPTY_CHECKSUM`` for a window partition left empty)."""
    if getattr(spec, "kind", None) is None:
        from lakepub.derive.state import EMPTY_CHECKSUM

        return EMPTY_CHECKSUM
    try:
        from lakepub.projection.checksum import partition_checksum

        return partition_checksum(spec.kind.output_schema().empty_table())
    except Exception:  # noqa: BLE001 - a kind without an output schema: emptiness unknown
        return None
