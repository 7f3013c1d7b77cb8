"""The janitor's hard delete of retired datasets whose grace is over.

``lakepub janitor`` (and ``--dry-run``, which lists and changes nothing) runs this before its
snapshot expiry. For every table of the namespace whose ``lakepub.retired`` record
(``retirement.py``) is due at ``now`` (``retired`` past ``at + grace``, or ``deleting``: a
janitor that crashed half-way) it deletes, in this order:

1. the claim: ``retired`` -> ``deleting`` by a compare-and-set on the metadata just checked (a
   restore or publish that landed since makes the claim fail: the dataset is left alone this run);
   the tables about to go with it (datasets downstream, and its entity's ledger and rejects table
   when no live dataset of the entity remains) are marked ``deleting`` too, so a janitor that
   crashes later finds them again from the catalog alone;
2. the definitions: the YAML files of the dataset and of every dataset downstream of it
   (``graph.py``: ``projection.inputs``, transitively), so no later ``run`` recreates them;
3. the tables: dropped from the catalog, then every file under each table's location deleted
   (data, manifests, metadata, the key index, orphans), refused like the janitor's orphan removal
   when another table lives inside that location; the views cache entry goes too.

Invariant: nothing is deleted for a dataset whose claim did not land, so a successful restore
always wins; a dataset not retired is deleted only as the downstream of one that is. Readers
see the dataset disappear at the drop (DuckDB views are built from the catalog's tables).
Cost: one catalog load per table of the namespace, one commit per claimed table, one listing
and delete per dropped table.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from pyiceberg.exceptions import NoSuchTableError

from lakepub.lifecycle.graph import definitions, downstream_of
from lakepub.lifecycle.retirement import RETIRED_PROPERTY, Retirement, compare_and_set, iso, mark_deleting, retirement_of
from lakepub.store.commit import CommitConflict
from lakepub.store.layout import ledger_id
from lakepub.store.rejects import rejects_id


@dataclass
class Doomed:
    """One thing the hard delete removes: a dataset (its table and definition) or an entity's
    ledger or rejects table."""

    name: str
    role: str  # retired | downstream | ledger | rejects
    reason: str
    table: str | None = None  # namespace.table, if it exists
    definition: str | None = None  # the YAML file, if any
    deleted_files: int = 0
    done: bool = False

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


@dataclass
class HardDeleteReport:
    dry_run: bool
    now: float
    deleted: list[Doomed] = field(default_factory=list)
    waiting: list[dict[str, object]] = field(default_factory=list)  # retired, grace not over
    skipped: list[str] = field(default_factory=list)  # claims that lost to a restore/publish

    @property
    def datasets(self) -> set[str]:
        return {d.name for d in self.deleted if d.role in ("retired", "downstream")}

    def as_dict(self) -> dict[str, object]:
        return {"dry_run": self.dry_run, "now": iso(int(self.now * 1000)),
                "deleted": [d.as_dict() for d in self.deleted], "waiting": self.waiting, "skipped": self.skipped}


def hard_delete(ws, *, now: float | None = None, dry_run: bool = False) -> HardDeleteReport:
    """Hard-delete what is due at ``now`` (Unix seconds; default: the clock); see the module."""
    now = time.time() if now is None else now
    report = HardDeleteReport(dry_run, now)
    catalog, ns = ws.catalog, ws.config.namespace
    tables = {}
    for ident in catalog.list_tables(ns):
        try:
            tables[ident[-1]] = catalog.load_table(ident)
        except NoSuchTableError:
            continue
    due: dict[str, Retirement] = {}
    for name, table in sorted(tables.items()):
        found = retirement_of(table)
        if found is None:
            continue
        if found.state == "deleting" or found.due(now):
            due[name] = found
        else:
            report.waiting.append({"dataset": name, **found.as_dict()})
    if not due:
        return report
    if not dry_run:  # 1. claim: a restore that landed first wins
        for name in [n for n, r in due.items() if r.state == "retired"]:
            if not mark_deleting(catalog, ws.config.commit, tables[name], due[name]):
                report.skipped.append(name)
                del due[name]
    report.deleted = _plan(ws, tables, due)
    if dry_run:
        return report
    for item in report.deleted:  # the rest of the claim: found again if this run crashes
        if item.table is not None and item.name not in due:
            _mark(ws, item.table)
    for item in report.deleted:  # 2. definitions
        if item.definition is not None:
            Path(item.definition).unlink(missing_ok=True)
    cache: dict = {}
    locations = _locations(tables)
    for item in report.deleted:  # 3. tables and files
        if item.table is not None:
            item.deleted_files = _drop(ws, item.table, locations, cache)
        item.done = True
    return report


def _plan(ws, tables: dict, due: dict[str, Retirement]) -> list[Doomed]:
    ns = ws.config.namespace
    catalog_dir = ws.config.root / ws.config.catalog_dir
    defs = definitions(catalog_dir)
    doomed = downstream_of(catalog_dir, sorted(due), known=defs)
    out: list[Doomed] = []
    for name in sorted(doomed, key=lambda n: (n not in due, n)):
        if name in due:
            r = due[name]
            reason = (f"retired at {iso(r.at_ms)}, grace {r.grace_s:g} s ended {iso(r.delete_after_ms)}"
                      if r.state == "retired" else "a janitor had started deleting it")
            role = "retired"
        else:
            role, reason = "downstream", "reads " + ", ".join(sorted(i for i in defs[name].inputs if i in doomed))
        out.append(Doomed(name, role, reason, f"{ns}.{name}" if name in tables else None,
                          str(defs[name].path) if name in defs else None))
    # An entity's ledger and rejects table go when none of its datasets stays defined.
    entities: dict[str, list[str]] = {}
    for name, spec in ws.config.datasets.items():
        entities.setdefault(spec.entity, []).append(name)
    for entity, members in sorted(entities.items()):
        if all(m in doomed for m in members):
            for role, ident in (("ledger", ledger_id(ns, entity)), ("rejects", rejects_id(ns, entity))):
                if ident[-1] in tables and ident[-1] not in doomed:
                    out.append(Doomed(ident[-1], role, f"no dataset of entity {entity} remains",
                                      ".".join(ident), None))
    return out


def _mark(ws, table_name: str) -> None:
    for _ in range(5):
        try:
            table = ws.catalog.load_table(table_name)
        except NoSuchTableError:
            return
        found = retirement_of(table)
        claimed = Retirement("deleting", found.at_ms if found else int(time.time() * 1000), 0.0)
        tx = table.transaction()
        tx.set_properties({RETIRED_PROPERTY: claimed.to_property()})
        try:
            compare_and_set(ws.catalog, ws.config.commit, table, tx)
            return
        except CommitConflict:  # a publish landed: re-read and mark again
            continue


def _locations(tables: dict) -> dict[str, str]:
    return {".".join(t.name()): t.location() for t in tables.values()}


def _drop(ws, table_name: str, locations: dict[str, str], cache: dict) -> int:
    """Drop the table from the catalog, then delete every file under its location."""
    from lakepub.maintenance.filestore import filestore_for, split_location
    from lakepub.maintenance.orphans import check_not_nested

    try:
        table = ws.catalog.load_table(table_name)
    except NoSuchTableError:
        return 0
    location = table.location()
    check_not_nested(table_name, location, locations)  # another table inside: delete nothing of it
    ws.catalog.drop_table(table_name)
    store = filestore_for(location, ws.config.catalog, cache)
    files = [f.path for f in store.list(location)]
    failed = store.delete(files)
    folder = split_location(location)
    if folder.scheme == "file":  # the emptied folders too
        for root, _dirs, _names in sorted(os.walk(folder.path), key=lambda w: -len(w[0])):
            try:
                os.rmdir(root)
            except OSError:
                pass
    cached = ws.config.root / ".lakepub" / "views" / (table_name.replace("/", "_") + ".json")
    cached.unlink(missing_ok=True)
    return len(files) - len(failed)
