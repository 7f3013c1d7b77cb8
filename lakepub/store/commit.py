"""Atomic multi-table commit for pyiceberg's SQL catalog (SQLite or PostgreSQL).

pyiceberg 0.12 commits one table at a time. lakepub needs the ledger and the published table
(which carries the checkpoint) to become visible together, so this module does for several
tables what ``SqlCatalog.commit_table`` does for one:

1. for each table, validate the transaction's requirements against the metadata the transaction
   was built on and stage the new metadata (``Catalog._update_and_stage_table``, done by ``_stage``
   without pyiceberg's deep copy of the whole metadata: ``store/write.staged_metadata``), then write the
   new metadata file (a table that moved meanwhile is caught by step 2; its new metadata file is
   then an orphan for the janitor);
2. in ONE database transaction, compare-and-set every table's ``metadata_location`` from the
   location staged in step 1 to the new one; if any row count is 0 the whole transaction rolls
   back, so a race lost after staging publishes nothing.

A table can take part with requirements only (no updates): its pointer is compare-and-set to
itself, which makes the commit fail if that table moved in the meantime.

After a confirmed commit (both modes), each moved table's ``metadata/version-hint.text`` is
pointed at its new metadata file for readers of the table folder (``store/version_hint.py``).
Inside ``deferred_cleanup()`` (``Workspace.run``, between its batches) an atomic commit returns
right after the pointer swap, and its hints and manifest clean-up finish in the background: the
next commit waits for them before it starts (so hints never go back in time), and so does the end
of the block. On S3 that takes a round trip per batch (3 more when a merge-append leaves a
manifest to delete) out of a ``run``'s requests in sequence; a crash in between leaves an older
hint, which a crash right after the swap could always do.

``load_table`` loads a table as pyiceberg's SQL catalog does, reading the pointer row every time
but parsing a metadata file (written once, under a new name) once per process: the derive path
reloads tables at every freshness point, half of them at a pointer it loaded before.

This uses non-public pyiceberg methods, hence the exact pin in pyproject.toml; the tests cover it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable, Iterator

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.io import load_file_io
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import StagedTable, Table, Transaction
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    AssertTableUUID,
    RemoveSnapshotRefUpdate,
    SetSnapshotRefUpdate,
    TableRequirement,
    TableUpdate,
)
from sqlalchemy import select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from lakepub.errors import ConfigError, DiskFull, OutcomeUnknown, RetryableError
from lakepub.failures import is_disk_full
from lakepub.faults import fault_point
from lakepub.store.version_hint import write_version_hint
from lakepub.store.write import staged_metadata

# The tables' metadata files, and after the swap the hints and manifest clean-up, are written side
# by side: on S3 each is a round trip of 20-50 ms (scripts/bench/object_store.py).
_PARALLEL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lakepub-commit")
# Inside ``deferred_cleanup()``: the post-swap work of the last commit, still under way.
_DEFERRED: ContextVar[list[Future] | None] = ContextVar("lakepub_deferred_cleanup", default=None)


@contextmanager
def deferred_cleanup() -> Iterator[None]:
    """Let atomic commits in this block return once their pointers are swapped, their version
    hints and manifest clean-up finishing in the background (waited for by the next commit and at
    the end of the block; see the module docstring)."""
    pending: list[Future] = []
    token = _DEFERRED.set(pending)
    try:
        yield
    except BaseException:
        _DEFERRED.reset(token)
        _finish(pending, quiet=True)  # the block's own error is the one to report
        raise
    _DEFERRED.reset(token)
    _finish(pending)


def _finish(futures: list[Future] | None, quiet: bool = False) -> None:
    while futures:
        future = futures.pop(0)
        try:
            future.result()
        except Exception:
            if not quiet:
                raise


class CommitConflict(Exception):
    """A requirement failed or a pointer moved: nothing was committed, reload and retry."""


@dataclass
class TableChange:
    """One table's part of an atomic commit: a transaction, or an assertion that it did not move."""

    table: Table
    transaction: Transaction | None = None

    def requirements_and_updates(self) -> tuple[tuple[TableRequirement, ...], tuple[TableUpdate, ...]]:
        uuid = AssertTableUUID(uuid=self.table.metadata.table_uuid)
        if self.transaction is None:
            pinned = AssertRefSnapshotId(ref="main", snapshot_id=self.table.metadata.current_snapshot_id)
            return (uuid, pinned), ()
        tx = self.transaction
        return (*tx._requirements, uuid), tx._updates  # noqa: SLF001 - see module docstring


COMMIT_MODES = ("auto", "atomic", "ordered")


def commit_mode(catalog: Catalog, mode: str = "auto") -> str:
    """``atomic`` (both tables in one database transaction) on SQL catalogs, else ``ordered``.

    ``ordered`` works on any catalog (Glue, REST, ...): the ledger is committed first and the
    published table's commit, which records the ledger snapshot it is consistent with, is the
    single visibility point. It can be forced on a SQL catalog (``commit: ordered``) for testing.
    """
    if mode not in COMMIT_MODES:
        raise ConfigError(f"commit mode must be one of {', '.join(COMMIT_MODES)}, got '{mode}'")
    if mode == "auto":
        return "atomic" if isinstance(catalog, SqlCatalog) else "ordered"
    if mode == "atomic" and not isinstance(catalog, SqlCatalog):
        raise ConfigError(f"commit: atomic needs a SQL catalog (SQLite or PostgreSQL), not {type(catalog).__name__}")
    return mode


def require_atomic_commit(catalog: Catalog) -> SqlCatalog:
    if not isinstance(catalog, SqlCatalog):
        raise ConfigError(
            f"atomic publish needs a SQL catalog (type: sql, SQLite or PostgreSQL); this workspace uses "
            f"{type(catalog).__name__}, which cannot move two tables in one commit"
        )
    return catalog


def reset_main(tx: Transaction, target: int | None) -> None:
    """Stage moving the table's main branch back to ``target`` (None: no snapshot) in ``tx``.

    Under the ordered commit, an append whose publish never became visible (crash or lost race)
    may sit on the ledger's main; the next writer builds on the published ledger snapshot instead.
    The staged requirement asserts main is still where it was loaded.
    """
    current = tx.table_metadata.current_snapshot_id
    if current == target:
        return
    requirement = AssertRefSnapshotId(ref="main", snapshot_id=current)
    if target is None:
        tx._stage((RemoveSnapshotRefUpdate(ref_name="main"),), (requirement,))  # noqa: SLF001
    else:
        update = SetSnapshotRefUpdate(snapshot_id=target, ref_name="main", type=SnapshotRefType.BRANCH)
        tx._stage((update,), (requirement,))  # noqa: SLF001


def commit_in_order(catalog: Catalog, changes: list[TableChange]) -> None:
    """Commit each table in turn with the catalog's own single-table commit (no silent rebase).

    The last change is the visibility point. A failure before it publishes nothing (earlier
    commits are unreferenced until a published snapshot names them); a failure of the last one is
    a conflict when the catalog says so, else an unknown outcome.
    """
    _finish(_DEFERRED.get())  # an earlier commit's hints first: they never go back in time
    for index, change in enumerate(changes):
        requirements, updates = change.requirements_and_updates()
        if not updates:
            continue
        last = index == len(changes) - 1
        if last:
            fault_point("before-pointer-swap")
        try:
            response = catalog.commit_table(change.table, requirements, updates)
        except CommitFailedException as exc:
            raise CommitConflict(str(exc)) from exc
        except RetryableError:  # store/uploads.UploadFailed: its metadata file was refused, nothing moved
            raise
        except Exception as exc:
            if isinstance(exc, OSError) and is_disk_full(exc):
                # Writing the new metadata file, which every catalog does before it moves the
                # pointer: nothing visible changed (an earlier table's commit is unreferenced).
                raise DiskFull(f"no space left writing the metadata of {'.'.join(change.table.name())} "
                               f"({' '.join(str(exc).split())}); nothing was published, free some space "
                               "and retry") from exc
            if not last:
                raise CommitConflict(f"commit of {'.'.join(change.table.name())} failed: {exc}") from exc
            raise OutcomeUnknown(f"catalog did not confirm the commit: {' '.join(str(exc).split())}") from exc
        delete_merged_away_manifests(change)
        write_version_hint(change.table.io, response.metadata.location, response.metadata_location)


# Parsed metadata files by location (``load_table``): a metadata file is written once under a new
# name and never changes, so a table loaded again at the same pointer needs its pointer, not a parse.
_PARSED: OrderedDict[str, TableMetadata] = OrderedDict()
_PARSED_MAX = 32  # a reconcile reloads its inputs and targets; a parsed metadata of a long history is ~MBs
_PARSED_LOCK = threading.Lock()


def load_table(catalog: Catalog, ident: tuple[str, ...]) -> Table:
    """``catalog.load_table(ident)``: the catalog's pointer as it is now, and for a SQL catalog the
    metadata file it names parsed once per process (pyiceberg reads and parses it on every load:
    ~1-2.5 ms for a derived table of a few hundred snapshots, 12 loads per offline rebuild, half of
    them of a pointer loaded before). The pointer is always read; only the parse of a location
    already parsed is skipped. NoSuchTableError as pyiceberg raises it."""
    if not isinstance(catalog, SqlCatalog):
        return catalog.load_table(ident)
    namespace = Catalog.namespace_to_string(Catalog.namespace_from(ident))
    stmt = select(IcebergTables.metadata_location, IcebergTables.table_namespace, IcebergTables.table_name).where(
        IcebergTables.catalog_name == catalog.name, IcebergTables.table_namespace == namespace,
        IcebergTables.table_name == Catalog.table_name_from(ident))
    if (type_filter := catalog._iceberg_type_filter()) is not None:  # noqa: SLF001 - as pyiceberg's load_table
        stmt = stmt.where(type_filter)
    with Session(catalog.engine) as session:
        row = session.execute(stmt).first()
    if row is None or not row.metadata_location:  # pyiceberg's error (one query, not a second load)
        raise NoSuchTableError(f"Table does not exist: {namespace}.{Catalog.table_name_from(ident)}")
    location = row.metadata_location
    with _PARSED_LOCK:
        metadata = _PARSED.get(location)
        if metadata is not None:
            _PARSED.move_to_end(location)
    if metadata is None:  # parsed as pyiceberg's SqlCatalog._convert_orm_to_iceberg parses it
        metadata = FromInputFile.table_metadata(load_file_io(properties=catalog.properties, location=location)
                                                .new_input(location))
        with _PARSED_LOCK:
            _PARSED[location] = metadata
            while len(_PARSED) > _PARSED_MAX:
                _PARSED.popitem(last=False)
    return Table(identifier=Catalog.identifier_to_tuple(row.table_namespace) + (row.table_name,), metadata=metadata,
                 metadata_location=location, io=catalog._load_file_io(metadata.properties, location),  # noqa: SLF001
                 catalog=catalog)


def commit_atomically(catalog: Catalog, changes: list[TableChange]) -> dict[str, str]:
    """Commit all changes or none; return {table name: new metadata location}.

    Raises CommitConflict when the commit certainly did not land (safe to rebuild and retry) and
    OutcomeUnknown when the database did not confirm the final COMMIT.
    """
    require_atomic_commit(catalog)
    deferred = _DEFERRED.get()
    _finish(deferred)  # an earlier commit's hints first: they never go back in time
    staged: list[tuple[tuple[str, ...], str, str]] = []
    hints = []  # (io, table location, new metadata location), written once the swap is confirmed
    writes = []  # the tables' new metadata files, written side by side (one round trip on S3)
    for change in changes:
        # Staged on the table as loaded when the transaction began: if another writer moved it
        # since, the compare-and-set of its metadata location below fails (CommitConflict).
        ident = change.table.name()
        current = change.table
        requirements, updates = change.requirements_and_updates()
        try:
            new = _stage(catalog, current, ident, requirements, updates)
        except CommitFailedException as exc:
            raise CommitConflict(str(exc)) from exc
        if updates:
            writes.append(_PARALLEL.submit(_write_metadata, catalog, new))
            staged.append((ident, current.metadata_location, new.metadata_location))
            hints.append((change.table.io, new.metadata.location, new.metadata_location))
        else:
            staged.append((ident, current.metadata_location, current.metadata_location))
    for wait in {write.result() for write in writes} - {None}:
        wait()  # S3: every file the new metadata files name is up before a pointer moves
    fault_point("before-pointer-swap")
    _swap_pointers(catalog, staged)
    # After the swap, side by side (on S3 each is a request or three): nothing here can fail the commit.
    done = [_PARALLEL.submit(delete_merged_away_manifests, change) for change in changes]
    done += [_PARALLEL.submit(write_version_hint, *hint) for hint in hints]
    if deferred is not None:
        deferred.extend(done)  # finished by the next commit, or at the end of deferred_cleanup()
    else:
        _finish(done)
    return {".".join(ident): new for ident, _, new in staged}


def _write_metadata(catalog: Catalog, new: StagedTable) -> Callable[[], None] | None:
    """Write a staged table's new metadata file; returns what to call before the pointer swap.
    On S3 (``store/s3.LakepubFileIO``) the file goes up beside the data files and manifests
    still uploading in the background instead of after them, and the swap waits for all of them
    (``uploads_done``): one round trip less per publish."""
    early = getattr(new.io, "metadata_before_uploads", None)
    with early() if early is not None else nullcontext():
        catalog._write_metadata(metadata=new.metadata, io=new.io, metadata_path=new.metadata_location)  # noqa: SLF001
    return getattr(new.io, "uploads_done", None) if early is not None else None


def _stage(catalog: Catalog, current: Table, ident: tuple[str, ...], requirements: tuple, updates: tuple) -> StagedTable:
    """``Catalog._update_and_stage_table`` for an existing table, its metadata built by
    ``write.staged_metadata`` (pyiceberg's, less a deep copy of the whole metadata)."""
    for requirement in requirements:
        requirement.validate(current.metadata)
    metadata = staged_metadata(current.metadata, updates, current.metadata_location)
    version = catalog._parse_metadata_version(current.metadata_location) + 1  # noqa: SLF001
    location = load_location_provider(metadata.location, metadata.properties).new_table_metadata_file_location(version)
    return StagedTable(identifier=ident, metadata=metadata, metadata_location=location,
                       io=catalog._load_file_io(properties=metadata.properties, location=location),  # noqa: SLF001
                       catalog=catalog)


def delete_merged_away_manifests(change: TableChange) -> None:
    """After a confirmed commit, delete the manifests this transaction wrote that its snapshot
    does not reference (merge-append writes a manifest, then merges it into another). pyiceberg
    leaves them behind as orphans; deleting them here saves the janitor one file per publish."""
    tx = change.transaction
    if tx is None:
        return
    added = [u.snapshot for u in tx._updates if isinstance(u, AddSnapshotUpdate)]  # noqa: SLF001
    try:
        referenced = {m.manifest_path for snapshot in added for m in snapshot.manifests(change.table.io)}
    except Exception:  # noqa: BLE001 - the commit has landed: failing it (or, deferred, the next) is not ours
        return  # e.g. a manifest list no longer in memory and its read failed: orphans for the janitor
    for producer in tx._snapshot_producers:  # noqa: SLF001
        for path in producer._written_manifests:  # noqa: SLF001
            if path not in referenced:
                try:
                    change.table.io.delete(path)
                except OSError:
                    pass  # an orphan for the janitor, nothing worse


def _row_at(sql: SqlCatalog, ident: tuple[str, ...], location: str) -> tuple:
    """The WHERE of a compare-and-set on the SQL catalog's row of ``ident`` at ``location``."""
    return (IcebergTables.catalog_name == sql.name,
            IcebergTables.table_namespace == Catalog.namespace_to_string(Catalog.namespace_from(ident)),
            IcebergTables.table_name == Catalog.table_name_from(ident),
            IcebergTables.metadata_location == location)


def _swap_pointers(catalog: SqlCatalog, staged: list[tuple[tuple[str, ...], str, str]]) -> None:
    """The pointer swap: every UPDATE, then one COMMIT. Until the COMMIT is sent nothing can have
    landed (a failure rolls back: a conflict to retry, or a full disk); a failure of the COMMIT
    itself is an unknown outcome (exit 5), whatever its cause, a full disk included."""
    session = Session(catalog.engine)
    try:
        try:
            for ident, old, new in staged:
                stmt = (update(IcebergTables).where(*_row_at(catalog, ident, old))
                        .values(metadata_location=new, previous_metadata_location=old))
                if session.execute(stmt).rowcount < 1:
                    session.rollback()
                    raise CommitConflict(f"table {'.'.join(ident)} was updated by another writer")
        except OperationalError as exc:  # e.g. "database is locked" before COMMIT: nothing landed
            session.rollback()
            if is_disk_full(exc):
                raise DiskFull(f"the catalog database is out of space ({' '.join(str(exc.orig).split())}); "
                               "nothing was published, free some space and retry") from exc
            raise CommitConflict(" ".join(str(exc.orig).split())) from exc
        except CommitConflict:
            raise
        except Exception:
            session.rollback()
            raise
        try:
            session.commit()
        except OperationalError as exc:
            # SQLite's "database is locked" at COMMIT (SQLITE_BUSY) leaves the transaction open and
            # unapplied: a conflict to retry. Any other engine's failure at COMMIT, PostgreSQL's lock
            # errors included, may or may not have landed.
            if catalog.engine.dialect.name == "sqlite" and "locked" in str(exc.orig).lower():
                session.rollback()
                raise CommitConflict(" ".join(str(exc.orig).split())) from exc
            raise OutcomeUnknown(f"catalog did not confirm the commit: {' '.join(str(exc.orig).split())}") from exc
        except Exception as exc:  # connection lost or disk full during COMMIT: it may or may not have landed
            raise OutcomeUnknown(f"catalog did not confirm the commit: {' '.join(str(exc).split())}") from exc
    finally:
        session.close()


def swap_table(catalog: Catalog, published: tuple[str, ...], expected: str, rebuilt: tuple[str, ...],
               unchanged: tuple[tuple[tuple[str, ...], str], ...] = (), rebuilt_location: str | None = None) -> str:
    """The offline rebuild's pointer swap: in ONE database transaction, point ``published`` at
    ``rebuilt``'s current metadata file (only if ``published`` still points at ``expected``) and
    drop ``rebuilt``'s catalog entry (only if it did not move either). Readers of ``published``
    see the old table until the COMMIT and the rebuilt one after it, never a mix; the rebuilt
    table's files, under its own folder, become the published table's. Returns the new metadata
    location. ``unchanged``: (table, metadata location) pairs that must not have moved either (a
    base dataset's ledger: the rebuilt rows are its live states at the recorded positions).
    ``rebuilt_location``: the rebuilt metadata the caller audited; the swap fails if ``rebuilt``
    moved since (another rebuild re-created it, a late window committed to it), so what is swapped
    in is what was audited. Without it, ``rebuilt``'s current metadata.
    CommitConflict if any pointer moved (nothing changed), OutcomeUnknown if the COMMIT was not
    confirmed.
    """
    from sqlalchemy import delete

    sql = require_atomic_commit(catalog)
    if rebuilt_location is None:
        rebuilt_location = catalog.load_table(rebuilt).metadata_location
    session = Session(sql.engine)
    try:
        try:
            moved = session.execute(
                update(IcebergTables).where(*_row_at(sql, published, expected))
                .values(metadata_location=rebuilt_location, previous_metadata_location=expected)).rowcount
            dropped = session.execute(
                delete(IcebergTables).where(*_row_at(sql, rebuilt, rebuilt_location))).rowcount
            for ident, location in unchanged:  # compare-and-set to itself: fails if it moved
                moved = min(moved, session.execute(
                    update(IcebergTables).where(*_row_at(sql, ident, location))
                    .values(metadata_location=location)).rowcount)
            if moved < 1 or dropped < 1:
                session.rollback()
                raise CommitConflict(f"table {'.'.join(published)} or {'.'.join(rebuilt)} was updated by another writer")
        except OperationalError as exc:
            session.rollback()
            raise CommitConflict(" ".join(str(exc.orig).split())) from exc
        try:
            session.commit()
        except Exception as exc:  # noqa: BLE001 - it may or may not have landed
            raise OutcomeUnknown(f"catalog did not confirm the swap: {' '.join(str(exc).split())}") from exc
    finally:
        session.close()
    return rebuilt_location


def exchange_tables(catalog: Catalog,
                    pairs: list[tuple[tuple[str, ...], str, tuple[str, ...], str, tuple[str, ...]]]) -> None:
    """The DUAL_WRITE -> DEFAULT swap (``contract/dual_write.py``): in ONE database transaction,
    for each (published, its expected metadata, new, its expected metadata, kept name): point
    ``published`` at the new version's metadata and rename ``new``'s catalog entry to ``kept``
    pointing at the old version's metadata (kept for DEPRECATED/RETIRED). Every UPDATE asserts
    the expected pointer; any row count of 0 (a table moved, or ``kept`` already exists) rolls
    the whole swap back: CommitConflict, nothing changed. ``kept`` is in ``new``'s namespace. OutcomeUnknown if the COMMIT was not
    confirmed. A pair whose expected metadata is None (no ``published`` table) renames ``new`` to
    ``published`` (an IntegrityError if one was created meanwhile: CommitConflict)."""
    from sqlalchemy.exc import IntegrityError

    sql = require_atomic_commit(catalog)
    session = Session(sql.engine)

    try:
        try:
            for published, old, new, new_location, kept in pairs:
                if old is None:  # no published table: ``new`` only takes its name
                    if session.execute(update(IcebergTables).where(*_row_at(sql, new, new_location)).values(
                            table_name=Catalog.table_name_from(published))).rowcount < 1:
                        session.rollback()
                        raise CommitConflict(f"table {'.'.join(new)} was updated by another writer")
                    continue
                renamed = session.execute(update(IcebergTables).where(*_row_at(sql, new, new_location)).values(
                    table_name=Catalog.table_name_from(kept), metadata_location=old, previous_metadata_location=new_location)).rowcount
                moved = session.execute(update(IcebergTables).where(*_row_at(sql, published, old)).values(
                    metadata_location=new_location, previous_metadata_location=old)).rowcount
                if renamed < 1 or moved < 1:
                    session.rollback()
                    raise CommitConflict(f"table {'.'.join(published)} or {'.'.join(new)} was updated by another writer")
        except (OperationalError, IntegrityError) as exc:
            session.rollback()
            raise CommitConflict(" ".join(str(exc.orig).split())) from exc
        try:
            session.commit()
        except Exception as exc:  # noqa: BLE001 - it may or may not have landed
            raise OutcomeUnknown(f"catalog did not confirm the swap: {' '.join(str(exc).split())}") from exc
    finally:
        session.close()
