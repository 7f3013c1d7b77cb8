"""The janitor: expire old snapshots, then delete the files nothing references any more.

For each lakepub table (the published table of each selected dataset, its entity's ledger and,
where lenient publish gates made one, its rejects table; with no dataset named, every dataset of
the workspace plus the shared audit table):

1. list the files under the table location, load the metadata and check that both describe the
   same place (``orphans.check_listing``); this is done for every table before anything is
   deleted, so a mismatch anywhere deletes nothing anywhere;
2. remove abandoned ``lakepub-staging-*`` branches and expire snapshots (``expiry``), retrying
   with a fresh plan when a concurrent commit moved a ref. A ledger keeps the snapshots that the
   published table records as its consistent ledger state (``ledger_pins``);
3. re-load the metadata and compute the referenced files; every listed file that is not
   referenced and was modified before ``now - grace`` is deletable: files of expired snapshots
   and orphans left by crashed or losing writers alike;
4. re-load the metadata once more right before deleting and drop anything it now references.

Then it deletes the *superseded table folders* of the same datasets: the folders an offline
rebuild's pointer swap left referenced by nothing (``superseded``: only folders named after a
dataset, not the location of any catalog table, every file older than the grace).

Concurrent publishers are safe: their files are younger than the grace until their commit lands,
and a commit landing between the listing and the deletion is caught by the re-load. Files that
were not listed (written after step 1) are never considered. ``now`` is an argument, so tests
control time; ``dry_run`` plans and reports, deleting and committing nothing.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Sequence

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from lakepub.errors import CommitContention, LakepubError
from lakepub.maintenance.durations import DEFAULT_OLDER_THAN_S, DEFAULT_RETAIN_LAST
from lakepub.maintenance.expiry import (ExpiryConflict, ExpiryPlan, ancestry, backoff,
                                        commit_expiry, plan_expiry)
from lakepub.maintenance.filestore import FileInfo, FileStore, filestore_for, normalize
from lakepub.maintenance.orphans import check_listing, check_not_nested, classify
from lakepub.maintenance.reachability import Progress, Reachability, live_partition_labels
from lakepub.maintenance.superseded import SupersededFolder, sweep, table_locations
from lakepub.store.audit import AUDIT_TABLE
from lakepub.store.layout import ledger_id, summary_id
from lakepub.store.rejects import rejects_id
from lakepub.store.record import snapshot_record
from lakepub.workspace import Workspace


class UnreadableMetadata(LakepubError):
    """A manifest list or manifest that live metadata references cannot be read (exit 1)."""


@dataclass(frozen=True)
class JanitorOptions:
    """``older_than_s``: snapshots younger than this are kept; also the orphan grace unless
    ``grace_s`` is given. ``retain_last``: snapshots kept per branch regardless of age."""

    older_than_s: float = DEFAULT_OLDER_THAN_S
    retain_last: int = DEFAULT_RETAIN_LAST
    dry_run: bool = False
    grace_s: float | None = None
    max_attempts: int = 5

    @property
    def grace(self) -> float:
        return self.older_than_s if self.grace_s is None else self.grace_s


@dataclass(frozen=True)
class Target:
    """One table to clean and its role: ``published``, ``ledger``, ``rejects`` or ``audit``."""

    ident: tuple[str, str]
    role: str
    dataset: str | None = None
    datasets: tuple[str, ...] = ()  # a ledger: every dataset of its entity (their records pin it)

    @property
    def name(self) -> str:
        return ".".join(self.ident)


@dataclass
class TableReport:
    """What the janitor did (or, in a dry run, would do) to one table."""

    table: str
    role: str
    dry_run: bool
    snapshots_before: int = 0
    snapshots_expired: int = 0
    snapshots_kept: int = 0
    staging_branches_removed: list[str] = field(default_factory=list)
    staging_branches_kept: list[str] = field(default_factory=list)
    files_listed: int = 0
    expired_files: int = 0  # deletable files only expired snapshots referenced
    orphan_files: int = 0  # other deletable unreferenced files (crashed or losing writers)
    young_files: int = 0  # unreferenced but modified within the grace period: kept
    bytes_found: int = 0
    files_removed: int = 0
    bytes_removed: int = 0
    failed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def files_found(self) -> int:
        """Files found deletable: those only expired snapshots referenced, plus orphans."""
        return self.expired_files + self.orphan_files

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {**asdict(self), "files_found": self.files_found}


@dataclass
class JanitorReport:
    """The whole run: options, ``now`` and one report per table."""

    now: float
    options: JanitorOptions
    tables: list[TableReport]
    retired: Any = None  # lakepub.lifecycle.hard_delete.HardDeleteReport: retired datasets hard-deleted
    superseded: list[SupersededFolder] = field(default_factory=list)  # folders old rebuilds left behind

    def totals(self) -> dict[str, int]:
        """Sums over the tables (snapshots expired, files and bytes found and removed, young files)."""
        keys = ("snapshots_expired", "files_found", "files_removed", "bytes_found", "bytes_removed", "young_files")
        return {k: sum(int(getattr(t, k)) for t in self.tables) for k in keys}

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form (``lakepub janitor --format json``)."""
        return {
            "dry_run": self.options.dry_run,
            "now": datetime.fromtimestamp(self.now, tz=timezone.utc).isoformat(timespec="seconds"),
            "older_than_s": self.options.older_than_s,
            "grace_s": self.options.grace,
            "retain_last": self.options.retain_last,
            "tables": [t.as_dict() for t in self.tables],
            "totals": self.totals(),
            "retired": self.retired.as_dict() if self.retired is not None else None,
            "superseded_folders": [f.as_dict() for f in self.superseded],
        }


@dataclass
class _Prepared:
    target: Target
    table: Table
    store: FileStore
    listing: list[FileInfo]
    reach: Reachability


def targets(ws: Workspace, datasets: Sequence[str] = ()) -> list[Target]:
    """The tables to clean: the published tables of the named datasets and their entities' ledgers,
    each ledger once (all, plus the audit table, if none are named)."""
    ns = ws.config.namespace
    names = list(dict.fromkeys(datasets)) or [*sorted(ws.config.datasets), *sorted(ws.config.derived)]
    out: list[Target] = []
    ledgers: set[str] = set()
    for name in names:
        if name in ws.config.derived:  # a derived dataset (lakepub reconcile's): a published table, no ledger
            out.append(Target(summary_id(ns, name), "published", name))
            continue
        ws.dataset(name)  # UnknownDataset (exit 2) for a typo
        out.append(Target(summary_id(ns, name), "published", name))
        group = ws.config.group(name)
        if group.name not in ledgers:
            ledgers.add(group.name)
            out.append(Target(ledger_id(ns, group.name), "ledger", name, group.dataset_names))
            # The entity's rejects table (lenient publish gates), skipped if it does not exist.
            out.append(Target(rejects_id(ns, group.name), "rejects", name, group.dataset_names))
    if not datasets:
        out.append(Target((ns, AUDIT_TABLE), "audit"))
    return out


def run_janitor(ws: Workspace, datasets: Sequence[str] = (), options: JanitorOptions = JanitorOptions(), *,
                now: float | None = None, progress: Progress | None = None,
                stores: dict[str, FileStore] | None = None) -> JanitorReport:
    """Clean the workspace's tables; see the module docstring. ``stores`` maps a scheme (``file``,
    ``s3``) to a FileStore, overriding the ones built from the catalog properties."""
    from lakepub.lifecycle.hard_delete import hard_delete

    now = time.time() if now is None else now
    catalog = ws.catalog
    cache: dict[str, FileStore] = dict(stores or {})
    # Retired datasets past their grace (and their downstream) go first (whole workspace runs only).
    retired = None if datasets else hard_delete(ws, now=now, dry_run=options.dry_run)
    gone = retired.datasets if retired is not None else set()
    chosen = [t for t in targets(ws, datasets) if t.dataset not in gone or t.role != "published"]
    locations = table_locations(catalog, ws.config.namespace)
    prepared = [p for t in chosen if (p := _prepare(catalog, t, ws.config.catalog, cache, progress, locations))]
    tables = [clean_table(catalog, p, options, now) for p in prepared]
    names = list(datasets) or [*ws.config.datasets, *ws.config.derived, *gone]
    superseded = sweep(catalog, ws.config.namespace, names, ws.config.catalog, now=now, grace=options.grace,
                       dry_run=options.dry_run, cache=cache)
    return JanitorReport(now, options, tables, retired, superseded)


def _prepare(catalog: Catalog, target: Target, props: dict[str, str], cache: dict[str, FileStore],
             progress: Progress | None, locations: dict[str, str]) -> _Prepared | None:
    """List the table's files, then load its metadata and check both agree (no side effects)."""
    try:
        table = catalog.load_table(target.ident)
    except NoSuchTableError:
        return None
    check_not_nested(target.name, table.location(), locations)
    before_listing = table.metadata_location  # written before the listing started: must be listed
    store = filestore_for(table.location(), props, cache)
    listing = list(store.list(table.location()))
    table = catalog.load_table(target.ident)  # metadata at least as new as the listing
    reach = Reachability(table.io, progress, label=f"scanning {target.name}")
    try:
        referenced = reach.referenced(table)
    except OSError as exc:  # a live manifest is unreadable: what is referenced is unknown
        raise UnreadableMetadata(f"{target.name}: cannot read its metadata tree ({' '.join(str(exc).split())}); "
                                 "deleted nothing") from exc
    check_listing(target.name, table.location(), before_listing, listing, referenced)
    return _Prepared(target, table, store, listing, reach)


def clean_table(catalog: Catalog, prep: _Prepared, options: JanitorOptions, now: float) -> TableReport:
    """Expire, then delete the table's unreferenced files older than the grace (steps 2-4)."""
    report = TableReport(prep.target.name, prep.target.role, options.dry_run,
                         snapshots_before=len(prep.table.metadata.snapshots), files_listed=len(prep.listing))
    plan, table, expired = expire(catalog, prep.target, prep.table, prep.reach, options, now)
    report.snapshots_expired, report.snapshots_kept = len(plan.expire), plan.kept
    report.staging_branches_removed = list(plan.remove_branches)
    report.staging_branches_kept = list(plan.young_staging_branches)
    report.warnings += plan.warnings

    if options.dry_run:
        gone = set(plan.expire)
        live = prep.reach.referenced(table, keep=lambda s: s.snapshot_id not in gone)
    else:
        table = catalog.load_table(prep.target.ident)
        live = prep.reach.referenced(table)
    found = classify(prep.listing, live, now - options.grace)
    of_expired = _files_of(prep.reach, expired, report, table.location())
    report.expired_files = sum(1 for f in found.deletable if normalize(f.path) in of_expired)
    report.orphan_files = len(found.deletable) - report.expired_files
    report.young_files = len(found.young)
    report.bytes_found = found.deletable_bytes
    if options.dry_run or not found.deletable:
        return report

    table = catalog.load_table(prep.target.ident)  # right before deleting: drop anything referenced now
    live = prep.reach.referenced(table)
    doomed = [f for f in found.deletable if normalize(f.path) not in live]
    failed: set[str] = set(prep.store.delete([f.path for f in doomed]))
    report.failed = sorted(failed)
    report.files_removed = sum(1 for f in doomed if f.path not in failed)
    report.bytes_removed = sum(f.size for f in doomed if f.path not in failed)
    return report


def expire(catalog: Catalog, target: Target, table: Table, reach: Reachability, options: JanitorOptions,
           now: float) -> tuple[ExpiryPlan, Table, list[Snapshot]]:
    """Plan (and unless dry-run, commit) the expiry; re-plan on a conflicting concurrent commit.

    Returns the plan that was applied, the table after it and the expired snapshots' objects
    (still readable: their files are deleted only afterwards)."""
    for attempt in range(options.max_attempts):
        labels = live_partition_labels(table, reach) if target.role == "published" else None
        pinned = ledger_pins(catalog, target, options.retain_last) if target.role == "ledger" else None
        plan = plan_expiry(table.metadata, now_ms=int(now * 1000), older_than_ms=int(options.older_than_s * 1000),
                           retain_last=options.retain_last, live_labels=labels, pinned=pinned)
        gone = set(plan.expire)
        expired = [s for s in table.metadata.snapshots if s.snapshot_id in gone]
        if options.dry_run or not plan.changes:
            return plan, table, expired
        try:
            return plan, commit_expiry(table, plan), expired
        except ExpiryConflict:
            backoff(attempt)
            table = catalog.load_table(target.ident)
    raise CommitContention(f"janitor: {target.name} kept changing while expiring snapshots "
                           f"({options.max_attempts} attempts); nothing was expired or deleted in it, retry")


def ledger_pins(catalog: Catalog, target: Target, retain_last: int) -> dict[int, str]:
    """Ledger snapshots recorded (``lakepub.ledger-snapshot``) by the current snapshot and the rest
    of the newest ``retain_last`` on main of every published table of the ledger's entity: they
    must outlive expiry."""
    assert target.dataset is not None
    pins: dict[int, str] = {}
    for dataset in target.datasets or (target.dataset,):
        try:
            summary = catalog.load_table(summary_id(target.ident[0], dataset))
        except NoSuchTableError:
            continue
        for snapshot in ancestry(summary.metadata, summary.metadata.current_snapshot_id)[:retain_last]:
            record = snapshot_record(snapshot)
            if record is not None and record.ledger_snapshot is not None:
                pins.setdefault(record.ledger_snapshot,
                                f"recorded by published snapshot {snapshot.snapshot_id} of {dataset}")
    return pins


def _files_of(reach: Reachability, snapshots: list[Snapshot], report: TableReport, location: str) -> set[str]:
    """Files the expired snapshots referenced (for the report's split only)."""
    try:
        return reach.snapshot_files(snapshots, location)
    except OSError as exc:  # an expired snapshot's manifest is already gone: count its files as orphans
        report.warnings.append(f"could not read an expired snapshot's manifests: {' '.join(str(exc).split())}")
        return set()
