"""Snapshot expiry: which snapshots to drop from a table's metadata, and the commit that drops them.

``plan_expiry`` is a pure function of the table metadata and ``now``. A snapshot is expired when
it is older than the window AND none of these keeps it:

* it is the head of a branch or tag (abandoned ``lakepub-staging-*`` branches past the window
  are removed first, which unprotects their heads);
* it is one of the newest ``retain_last`` snapshots of a branch's ancestry (``main`` included;
  a ref's own ``min-snapshots-to-keep`` raises this);
* ledger only: the ledger snapshots that the published table's newest snapshots record in
  ``lakepub.ledger-snapshot`` (``pinned``): publishers under the ordered commit read and build on
  exactly that snapshot, and ``lakepub verify --deep`` compares against it;
* published table only: ``lakepub verify`` and the foreign-head check take each partition's
  checksum from the newest publish on main's lineage that rewrote it (``store/record.lineage``:
  the parent chain, continued below a gap left by expiry with what is older than the walk so far),
  so the newest checksum record is chosen by that same walk, never by sequence number over all
  snapshots: a snapshot left off the lineage by a rollback lies between lineage members and is
  never chosen (older than the window and unprotected, it is expired like any other). It is kept
  for every partition present in the current data, and for every partition whose newest record
  is not empty even though the current data lack it (deleted by another tool: rolling the table
  back to lakepub's snapshot, as a publish advises, must leave it verifiable).

``commit_expiry`` uses pyiceberg's builders (``ManageSnapshots.remove_branch``,
``ExpireSnapshots.by_ids``) to stage the change, then commits it with one requirement per ref
the plan was made against, so a concurrent change of any ref fails the commit (the caller
re-plans) instead of being rebased silently. Once it lands, the table folder's version hint is
moved to the new metadata file (``store/version_hint.py``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import AssertRefSnapshotId, AssertTableUUID, TableRequirement
from pyiceberg.table.update.snapshot import ExpireSnapshots, ManageSnapshots
from sqlalchemy.exc import OperationalError

from lakepub.identity import partition_checksum
from lakepub.projection.checksum import is_empty
from lakepub.maintenance.durations import DEFAULT_RETAIN_LAST  # with the janitor's other defaults
from lakepub.store.record import lineage
from lakepub.store.version_hint import write_version_hint

STAGING_PREFIX = "lakepub-staging-"


@dataclass(frozen=True)
class ExpiryPlan:
    """What an expiry run does to one table: snapshots to drop, staging branches to remove."""

    expire: tuple[int, ...]
    kept: int
    remove_branches: tuple[str, ...] = ()
    young_staging_branches: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    protected: dict[int, str] = field(default_factory=dict)  # snapshot id -> first reason kept

    @property
    def changes(self) -> bool:
        return bool(self.expire or self.remove_branches)


def ancestry(metadata: TableMetadata, snapshot_id: int | None) -> list[Snapshot]:
    """The snapshot and its ancestors still in the metadata, newest first."""
    out: list[Snapshot] = []
    seen: set[int] = set()
    snapshot = metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    while snapshot is not None and snapshot.snapshot_id not in seen:
        out.append(snapshot)
        seen.add(snapshot.snapshot_id)
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
    return out


def recorded_checksums(snapshot: Snapshot) -> dict[str, str]:
    """The partitions and checksums this snapshot's ``lakepub.checksums`` record carries."""
    props = snapshot.summary.additional_properties if snapshot.summary is not None else {}
    raw = props.get("lakepub.checksums")
    if not raw:
        return {}
    try:
        found = json.loads(raw)
    except (ValueError, TypeError):
        return {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}




_EMPTY_PARTITION = partition_checksum([])  # what a publish records for a partition it emptied


def plan_expiry(metadata: TableMetadata, *, now_ms: int, older_than_ms: int, retain_last: int = DEFAULT_RETAIN_LAST,
                live_labels: set[str] | None = None, pinned: dict[int, str] | None = None,
                staging_prefix: str = STAGING_PREFIX) -> ExpiryPlan:
    """Decide which snapshots to expire. ``live_labels`` (published table only; None for other
    tables) are the partitions present in the current data whose newest checksum record on main's
    lineage must stay (and so must any partition's whose newest record is not empty);
    ``pinned`` maps snapshot ids that must be kept to the reason (ids not in the table are ignored)."""
    if retain_last < 1:
        raise ValueError("retain_last must be at least 1")
    cutoff = now_ms - older_than_ms
    protected: dict[int, str] = {}
    warnings: list[str] = []

    def keep(snapshot_id: int, reason: str) -> None:
        protected.setdefault(snapshot_id, reason)

    remove, young = [], []
    for name, ref in sorted(metadata.refs.items()):
        head = metadata.snapshot_by_id(ref.snapshot_id)
        if ref.snapshot_ref_type == SnapshotRefType.BRANCH and name.startswith(staging_prefix):
            if head is None or head.timestamp_ms < cutoff:
                remove.append(name)
                continue
            young.append(name)
        keep(ref.snapshot_id, f"head of {ref.snapshot_ref_type.value} {name}")
        if ref.snapshot_ref_type == SnapshotRefType.BRANCH:
            depth = max(retain_last, ref.min_snapshots_to_keep or 0)
            for snapshot in ancestry(metadata, ref.snapshot_id)[:depth]:
                keep(snapshot.snapshot_id, f"among the last {depth} of branch {name}")
    if metadata.current_snapshot_id is not None:
        keep(metadata.current_snapshot_id, "current snapshot")
    for snapshot_id, reason in (pinned or {}).items():
        if metadata.snapshot_by_id(snapshot_id) is not None:
            keep(snapshot_id, reason)

    if live_labels is not None:
        missing = set(live_labels)
        chosen: dict[int, list[str]] = {}
        seen: set[str] = set()
        for snapshot in lineage(metadata, metadata.current_snapshot_id):
            for label, checksum in sorted(recorded_checksums(snapshot).items()):
                if label in seen:
                    continue
                seen.add(label)
                if label in live_labels or not is_empty(checksum, _EMPTY_PARTITION):
                    chosen.setdefault(snapshot.snapshot_id, []).append(label)
                    missing.discard(label)
        for snapshot_id, labels in chosen.items():
            keep(snapshot_id, f"newest checksum record of partition(s) {', '.join(labels)}")
        if missing:
            warnings.append(f"partition(s) {', '.join(sorted(missing))} have no checksum record left; "
                            "'lakepub verify' will report them")

    expire = tuple(sorted(s.snapshot_id for s in metadata.snapshots
                          if s.snapshot_id not in protected and s.timestamp_ms < cutoff))
    return ExpiryPlan(expire, len(metadata.snapshots) - len(expire), tuple(remove), tuple(young), tuple(warnings),
                      protected)


class ExpiryConflict(Exception):
    """The table changed while expiring; nothing was committed."""


def commit_expiry(table: Table, plan: ExpiryPlan) -> Table:
    """Commit the plan against exactly the metadata it was made from; return the reloaded table.

    Raises ExpiryConflict when any ref moved (or the table changed in a way that makes the plan
    invalid) so the caller can reload and re-plan.
    """
    tx = table.transaction()
    if plan.remove_branches:
        manage = ManageSnapshots(tx)
        for name in plan.remove_branches:
            manage.remove_branch(name)
        manage.commit()
    if plan.expire:
        ExpireSnapshots(tx).by_ids(list(plan.expire)).commit()
    updates = tx._updates  # noqa: SLF001 - committed below with every ref pinned, see module docstring
    requirements: tuple[TableRequirement, ...] = (
        AssertTableUUID(uuid=table.metadata.table_uuid),
        *(AssertRefSnapshotId(ref=name, snapshot_id=ref.snapshot_id)  # type: ignore[call-arg]
          for name, ref in sorted(table.metadata.refs.items())),
    )
    try:
        response = table.catalog.commit_table(table, requirements, updates)
    except (CommitFailedException, ValueError) as exc:  # ValueError: a snapshot vanished (another janitor)
        raise ExpiryConflict(" ".join(str(exc).split())) from exc
    except OperationalError as exc:  # e.g. SQLite "database is locked"; the CAS did not land
        if "locked" not in str(exc).lower():
            raise
        raise ExpiryConflict(" ".join(str(exc.orig).split())) from exc
    write_version_hint(table.io, response.metadata.location, response.metadata_location)
    return table.catalog.load_table(table.name())


def backoff(attempt: int, base_s: float = 0.05, cap_s: float = 1.0) -> None:
    """Sleep before re-planning after a conflict."""
    time.sleep(min(base_s * 2 ** attempt, cap_s))
