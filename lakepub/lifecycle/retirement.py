"""Soft delete: ``lakepub retire DATASET`` / ``lakepub restore DATASET``.

Where it is recorded: a table property of the dataset's published table, ``lakepub.retired``
(JSON ``{"state": "retired", "at_ms": ..., "grace_s": ...}``), set and removed by an ordinary
Iceberg commit through the catalog. The catalog is what every writer already shares (several
machines on one PostgreSQL/Glue catalog, each with its own checkout of the workspace folder), so
every reader, publisher and janitor sees a retirement at the same moment, and the commit is a
compare-and-set on the table's metadata pointer like any publish: a retire racing a publish makes
one of them reload and retry, never lose the other's change. A file in the workspace would only be
seen by the machine that wrote it. The cost: one metadata file per retire/restore, and one catalog
load per dataset wherever listings need to know (``retired_names``); the published views and the
table list read the property from the table they load anyway.

Invariant: a retired dataset's published data and positions stay exactly as they were (its
current snapshot, its data files and its records are not touched; the janitor's usual expiry of
snapshots older than ``--older-than`` and of unreferenced files still applies to it); it is hidden from ``query``/``connect`` views and the listings (``tables``,
``status`` and ``metrics`` without names, ``report``), ``run DATASET`` skips it with exit 0, and
``publish`` into it is refused (exit 3). ``restore`` removes the property, and everything is back.
A dataset sharing its entity with live datasets is still maintained by their publishes (they
commit together; freezing it would force a rebuild on restore).

The janitor (``hard_delete``) first turns ``retired`` into ``deleting`` by a compare-and-set commit
on the very metadata it checked, so a restore that lands first makes the janitor skip the dataset,
and a restore after it is refused (exit 3): a dataset is never deleted after a successful restore.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table

from lakepub.errors import BlockedError, CommitContention, UserError
from lakepub.maintenance.durations import grace_end_ms
from pyiceberg.catalog.sql import SqlCatalog

from lakepub.store.commit import CommitConflict, TableChange, commit_atomically, commit_in_order, commit_mode

RETIRED_PROPERTY = "lakepub.retired"
DEFAULT_GRACE_S = 7 * 86400.0  # like dbt/SQLMesh janitors: a week to notice and restore
_ATTEMPTS = 8


class DatasetRetired(BlockedError):
    """The dataset is retired (or being hard-deleted): refused (exit 3) until it is restored."""


@dataclass(frozen=True)
class Retirement:
    """A dataset's retirement: since when, the grace before the janitor may hard-delete it, and
    ``state`` ``retired`` or ``deleting`` (the janitor has started; no restore any more)."""

    state: str
    at_ms: int
    grace_s: float

    @property
    def delete_after_ms(self) -> int:
        """When the grace ends (``durations.grace_end_ms``: never for an infinite grace)."""
        return grace_end_ms(self.at_ms, self.grace_s)

    def due(self, now: float) -> bool:
        """The grace is over at ``now`` (Unix seconds); never for an infinite grace."""
        return math.isfinite(self.grace_s) and now * 1000 >= self.delete_after_ms

    def as_dict(self) -> dict[str, object]:
        """JSON-ready: an infinite grace (a record that could not be read) is null, as its end."""
        finite = math.isfinite(self.grace_s)
        return {**asdict(self), "grace_s": self.grace_s if finite else None, "at": iso(self.at_ms),
                "delete_after": iso(self.delete_after_ms) if finite else None}

    def to_property(self) -> str:
        return json.dumps({"state": self.state, "at_ms": self.at_ms, "grace_s": self.grace_s}, sort_keys=True)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def retirement_of(table: Table | None) -> Retirement | None:
    """The table's retirement, or None. An unreadable record still counts as retired (hidden),
    with an infinite grace: the janitor never deletes on a record it cannot read."""
    text = table.metadata.properties.get(RETIRED_PROPERTY) if table is not None else None
    if not text:
        return None
    try:
        raw = json.loads(text)
        return Retirement(str(raw.get("state", "retired")), int(raw["at_ms"]), float(raw["grace_s"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        return Retirement("retired", 0, float("inf"))


def retired_names(ws) -> dict[str, Retirement]:
    """{dataset: retirement} of the workspace's retired datasets (one catalog load per dataset)."""
    out = {}
    for name in sorted(ws.config.datasets):
        found = retirement_of(ws._summary_table(name))  # noqa: SLF001 - the workspace's loader
        if found is not None:
            out[name] = found
    return out


def retirement_note(ws, status):
    """``status`` (a ``reports.DatasetStatus``) with a note saying its dataset is retired, if it is."""
    from dataclasses import replace

    found = retirement_of(ws._summary_table(status.dataset))  # noqa: SLF001
    if found is None:
        return status
    note = (f"retired since {iso(found.at_ms)} ({found.state}): hidden from queries and listings, skipped by run; "
            + (f"'lakepub restore {status.dataset}' undoes it until {iso(found.delete_after_ms)}"
               if math.isfinite(found.grace_s) else
               f"its retirement record cannot be read, so it is never hard-deleted; 'lakepub restore "
               f"{status.dataset}' undoes it"))
    return replace(status, note=f"{note}; {status.note}" if status.note else note)


def check_not_retired(table: Table | None, dataset: str, doing: str) -> None:
    """Raise DatasetRetired (exit 3) if ``table`` is retired."""
    found = retirement_of(table)
    if found is not None:
        raise DatasetRetired(f"{dataset} is retired since {iso(found.at_ms)}; {doing} is refused. "
                             f"Run 'lakepub restore {dataset}' to use it again")


@dataclass(frozen=True)
class RetireResult:
    dataset: str
    changed: bool  # False: it was already retired (retire) / not retired (restore)
    retirement: Retirement | None
    downstream: list[str]

    def as_dict(self) -> dict[str, object]:
        return {"dataset": self.dataset, "changed": self.changed,
                "retired": self.retirement.as_dict() if self.retirement else None, "downstream": self.downstream}


def retire(ws, dataset: str, *, grace_s: float = DEFAULT_GRACE_S, now: float | None = None) -> RetireResult:
    """Retire ``dataset`` (idempotent: an already retired dataset keeps its date and grace).

    Refused (exit 3) for a dataset never published: there is nothing to hide, and the record
    lives on its table; delete its YAML file to stop defining it."""
    from lakepub.lifecycle.graph import downstream_of

    spec = ws.config.definition(dataset)
    below = sorted(downstream_of(ws.config.root / ws.config.catalog_dir, [dataset]) - {dataset})
    try:  # a grace ending past what a timestamp can say would be recorded, then unprintable
        iso(int(((time.time() if now is None else now) + grace_s) * 1000))
    except (ValueError, OverflowError, OSError):
        raise UserError(f"--grace: {grace_s:g} s would end after the year 9999; give a shorter grace "
                        "(e.g. 7d, 52w); nothing was retired") from None

    def change(table: Table) -> Retirement | None:
        if retirement_of(table) is not None:
            return None
        return Retirement("retired", int((time.time() if now is None else now) * 1000), float(grace_s))

    table = ws._summary_table(dataset)  # noqa: SLF001
    if table is None:
        raise BlockedError(f"{dataset} has never been published: there is nothing to retire (no table). "
                           f"To stop defining it, delete {spec.path}")
    table, done = _commit(ws, dataset, table, change)
    found = retirement_of(table)
    return RetireResult(dataset, done is not None, found, below)


def restore(ws, dataset: str) -> RetireResult:
    """Undo ``retire`` (idempotent); refused (exit 3) once the janitor has started deleting it."""
    ws.config.definition(dataset)

    def change(table: Table) -> bool | None:
        found = retirement_of(table)
        if found is None:
            return None
        if found.state != "retired":
            raise DatasetRetired(f"{dataset} is being hard-deleted by the janitor (its grace ended at "
                                 f"{iso(found.delete_after_ms)}); it can no longer be restored")
        return True

    table = ws._summary_table(dataset)  # noqa: SLF001
    if table is None:
        return RetireResult(dataset, False, None, [])
    before = retirement_of(table)
    table, done = _commit(ws, dataset, table, change)
    return RetireResult(dataset, done is not None, before if done else None, [])


def _commit(ws, dataset: str, table: Table, change):
    """Apply ``change(table)`` (a Retirement to set, True to remove, None for nothing) by a
    compare-and-set commit, reloading on a lost race."""
    for _ in range(_ATTEMPTS):
        wanted = change(table)
        if wanted is None:
            return table, None
        tx = table.transaction()
        if isinstance(wanted, Retirement):
            tx.set_properties({RETIRED_PROPERTY: wanted.to_property()})
        else:
            tx.remove_properties(RETIRED_PROPERTY)
        try:
            compare_and_set(ws.catalog, ws.config.commit, table, tx)
            return ws.catalog.load_table(table.name()), wanted
        except CommitConflict:  # a publish (or another retire) landed first: re-read and retry
            try:
                table = ws.catalog.load_table(table.name())
            except NoSuchTableError:
                raise DatasetRetired(f"{dataset}: its table was dropped meanwhile") from None
    raise CommitContention(f"{dataset}: the table kept changing ({_ATTEMPTS} attempts); nothing changed, retry")


def compare_and_set(catalog, mode: str, table: Table, tx) -> None:
    """Commit ``tx`` only if ``table`` is still at the metadata it was loaded at (CommitConflict
    otherwise). SQL catalogs: the compare-and-set of ``store/commit.py`` (``mode`` is only checked:
    pyiceberg's own ``SqlCatalog.commit_table`` would re-apply the change onto the current metadata). Other catalogs (Glue,
    REST) commit with their own single-table commit, which re-applies a property change onto
    whatever is current: there a restore racing the janitor's claim at the very end of the grace
    may lose (documented in README)."""
    commit_mode(catalog, mode)  # a misconfigured mode is a ConfigError here too
    change = TableChange(table, tx)
    if isinstance(catalog, SqlCatalog):  # whatever the publishes' commit mode (``ordered`` included)
        commit_atomically(catalog, [change])
    else:
        commit_in_order(catalog, [change])


def mark_deleting(catalog, mode: str, table: Table, retirement: Retirement) -> bool:
    """The janitor's claim: ``retired`` -> ``deleting`` by a compare-and-set on ``table``'s current
    metadata (the one whose retirement was checked). False when anything committed since (a
    restore, a publish): the janitor leaves the dataset for its next run."""
    claimed = Retirement("deleting", retirement.at_ms, retirement.grace_s)
    tx = table.transaction()
    tx.set_properties({RETIRED_PROPERTY: claimed.to_property()})
    try:
        compare_and_set(catalog, mode, table, tx)
    except CommitConflict:
        return False
    return True
