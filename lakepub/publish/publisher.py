"""The publish protocol, one batch at a time.

1. validate the batch's range (events were validated when read);
2. the start vector must equal the committed vector of its source, else the batch is either
   already published (same identity in the history: success, nothing to do) or stale (refused);
3. project the batch against the ledger (conflicts block the publish);
4. rewrite the affected partitions of the published table (its current rows and files are kept
   between publishes while no one else moves it: publish/published_state.py);
5. write the new files, then commit ledger + published table (whose snapshot summary carries the
   checkpoint) in one atomic catalog commit that asserts both expected parents;
6. a lost race reloads and starts over from step 2, a bounded number of times with backoff.

A crash anywhere before the pointer swap publishes nothing (the files written are orphans for
the janitor); a crash after it is recognised as "already published" on retry.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import Future
import warnings
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

import duckdb
import numpy as np
import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, Transaction

from lakepub import positions
from lakepub.config import DatasetSpec
from lakepub.errors import BlockedError, CommitContention, InvalidPosition, OutcomeUnknown, PayloadConflict, StaleStart
from lakepub.faults import fault_point
from lakepub.identity import BatchIdentity, canonical, events_digest
from lakepub.positions import Vector
from lakepub.publish.lookup import LedgerLookup
from lakepub.publish.projection import BatchSide, Projection, prepare_batch, project
from lakepub.publish.rebase import ledger_files_added_since, touches_orders
from lakepub.publish import published_state
from lakepub.publish.published_state import PublishedState
from lakepub.publish.rewrite import check_totals, rewrite_partitions
from lakepub.store import audit, key_index
from lakepub.store.commit import CommitConflict, TableChange, commit_atomically, commit_in_order, commit_mode, reset_main
from lakepub.store.layout import (
    HISTORY_ARROW, SUMMARY_ARROW, DatasetTables, day_partition_value, ensure_tables, ledger_arrow, load_tables, order_keys_version,
)
from lakepub.store.files import FileWriter
from lakepub.store.write import append_files, partition_value, replace_partitions, transaction
from lakepub.store.record import Counts, PublishRecord, find_batch, latest_published
from lakepub.publish.guards import check_file_specs, check_foreign, check_schemas, table_grain


# Ledger columns written without a dictionary: unique values, where building one is wasted work
# (88k rows: 22 ms -> 19 ms). Low-cardinality columns keep it: the ledger lookup decodes version
# for every ledger row, and plain-encoded versions made it ~35% slower at 10M rows.
_LEDGER_PLAIN = ("order_id", "k1", "k2")


@dataclass(frozen=True)
class PreparedBatch:
    """A batch's events in canonical order, their digest and the batch side of the projection
    (``Publisher.prepare``)."""

    events: pa.Table
    digest: str
    side: BatchSide


@dataclass(frozen=True)
class PublishResult:
    status: str  # "published" or "already-published"
    dataset: str
    batch_id: str
    snapshot_id: int | None
    source: str
    start: Vector
    end: Vector
    positions: dict[str, Vector]
    counts: Counts
    partitions: list[str] = field(default_factory=list)
    attempts: int = 1

    def as_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["counts"] = asdict(self.counts)
        return out


class Publisher:
    """Publishes batches of one dataset. Keeps a catalog handle and one DuckDB connection."""

    def __init__(
        self,
        catalog: Catalog,
        namespace: str,
        spec: DatasetSpec,
        duck_factory: Callable[[], duckdb.DuckDBPyConnection],
        *,
        max_attempts: int = 10,
        backoff_s: float = 0.05,
        max_backoff_s: float = 2.0,
        mode: str = "auto",
        key_index: bool = True,
    ):
        """``key_index``: keep and use the ledger's key index (``store/key_index.py``) where the
        warehouse allows it (a local file system); False looks the ledger up by scanning it."""
        self.catalog, self.namespace, self.spec = catalog, namespace, spec
        # DuckDB (~0.15 s of extension loading) is opened on first use: only a ledger without a
        # key index, or a rebase check, needs it.
        self._duck_factory = duck_factory
        self._con: duckdb.DuckDBPyConnection | None = None
        self._published: PublishedState | None = None  # see publish/published_state.py
        self.max_attempts, self.backoff_s, self.max_backoff_s = max_attempts, backoff_s, max_backoff_s
        self.rebases = 0  # commit races lost and retried, for tests and benchmarks
        self.ordered = commit_mode(catalog, mode) == "ordered"
        tables = ensure_tables(catalog, namespace, spec.name, spec.partition)
        self.grain = table_grain(spec, tables.summary)  # the table's real spec must be the definition's
        self._vetted: int | None = None  # a foreign head whose data were found to be the published data
        ledger = tables.ledger
        self._lookup = LedgerLookup(lambda: self.con, ledger.location(), use_index=key_index)

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            self._con = self._duck_factory()
        return self._con

    @staticmethod
    def prepare(events: pa.Table) -> PreparedBatch:
        """Everything of a publish that needs no table: sort the events canonically, digest them,
        and compute the batch side of the projection (``Workspace.run`` prepares the next batch
        in its read-ahead thread while the current one publishes)."""
        events = canonical(events)  # sorted once: the digest and the projection both need it
        return PreparedBatch(events, events_digest(events, is_canonical=True), prepare_batch(events))

    def publish(self, events: pa.Table | PreparedBatch, *, source: str, start: Vector, end: Vector) -> PublishResult:
        prepared = events if isinstance(events, PreparedBatch) else self.prepare(events)
        events = prepared.events
        covered = positions.check_range(start, end)
        if covered != events.num_rows:
            raise InvalidPosition(
                f"batch has {events.num_rows} events but positions {positions.dumps(start)} -> "
                f"{positions.dumps(end)} cover {covered} records"
            )
        identity = BatchIdentity(self.spec.name, source, start, end, prepared.digest)
        try:
            return self._publish_with_retries(prepared, identity)
        except BlockedError as exc:
            self._audit(identity, exc, events.num_rows)
            raise

    def _publish_with_retries(self, prepared: PreparedBatch, identity: BatchIdentity) -> PublishResult:
        events = prepared.events
        projection: Projection | None = None
        base_ledger: int | None = None
        for attempt in range(1, self.max_attempts + 1):
            tables = load_tables(self.catalog, self.namespace, self.spec.name)
            latest = latest_published(tables.summary)  # the checkpoint, even under foreign snapshots
            previous = latest[1] if latest else None
            self._check_head(tables, latest)
            done = self._check_position(tables.summary, previous, identity, attempt)
            if done is not None:
                return done
            # The ledger snapshot the published table names: under the atomic commit it is the
            # ledger's main; after an ordered-mode crash (or a switch of mode) main may hold an
            # append no publish names, so the recorded snapshot is read and built on, in both modes.
            head = previous.ledger_snapshot if previous else None
            if projection is not None and not self._commutes(tables.ledger, base_ledger, head, events):
                projection = None  # a concurrent publish touched our orders: recompute
            if projection is None:
                projection = project(prepared.side, self._lookup.rows(tables.ledger, head, prepared.side),
                                     order_keys_version(tables.ledger))
                base_ledger = head
            try:
                return self._attempt(tables, previous, projection, identity, attempt)
            except CommitConflict:
                self.rebases += 1
                time.sleep(self._backoff(attempt))
            except OutcomeUnknown:
                # The database may have committed. Its state is definite now: look it up.
                found = find_batch(self.catalog.load_table(tables.summary.name()), identity.batch_id)
                if found is None:
                    raise
                return self._already_published(identity, found[0].snapshot_id, found[1].positions, attempt)
        raise CommitContention(
            f"gave up after {self.max_attempts} attempts: concurrent writers kept moving dataset "
            f"'{self.spec.name}'; nothing was published by this batch, retry it"
        )

    def _check_head(self, tables: DatasetTables, latest: tuple | None) -> None:
        """Build only on published data: both tables have lakepub's schemas, the table's grain is
        still the definition's, and a head written by another tool holds exactly the published
        data (``publish/guards.py``)."""
        summary = tables.summary
        check_schemas(summary, tables.ledger)  # a schema change makes no snapshot: checked every time
        self.grain = table_grain(self.spec, summary)
        current = summary.metadata.current_snapshot_id
        if current is None:
            return
        if current != self._vetted and (latest is None or latest[0].snapshot_id != current):
            # The rows exactly as read: a day appended twice must reach the checksums twice.
            snapshot_id, tasks, rows = published_state.read(summary)
            check_foreign(summary, latest, rows, self.grain)
            self._published = published_state.from_rows(summary, snapshot_id, tasks, rows, self.grain)
            self._vetted = current
        if len(summary.metadata.partition_specs) > 1:  # the spec evolved: no file of another spec may be live
            check_file_specs(summary, (f for files in self._published_state(summary).files.values() for f in files))

    def _check_position(self, summary: Table, record: PublishRecord | None, identity: BatchIdentity,
                        attempt: int) -> PublishResult | None:
        committed = (record.positions if record else {}).get(identity.source, {})
        if positions.same_position(identity.start, committed):
            return None
        found = find_batch(summary, identity.batch_id)
        if found is not None:
            return self._already_published(identity, found[0].snapshot_id, found[1].positions, attempt)
        raise StaleStart(identity.source, positions.normalize(identity.start), positions.normalize(committed),
                         _truncated_history_note(summary, identity, committed))

    def _commutes(self, ledger: Table, base_snapshot_id: int | None, head_snapshot_id: int | None,
                  events: pa.Table) -> bool:
        """Whether the ledger commits between our base and the new head touched none of our orders."""
        if head_snapshot_id == base_snapshot_id:
            return True
        self.con.register("lp_rebase_events", events)
        try:
            files = ledger_files_added_since(ledger, base_snapshot_id, head_snapshot_id)
            return files is not None and not touches_orders(self.con, files, "lp_rebase_events")
        except (OSError, duckdb.IOException):  # e.g. manifests of an expired snapshot already removed
            return False
        finally:
            self.con.unregister("lp_rebase_events")

    def _attempt(self, tables: DatasetTables, previous: PublishRecord | None, projection: Projection,
                 identity: BatchIdentity, attempt: int) -> PublishResult:
        # The ledger's new data file and key-index run are written in the background while the
        # partitions are rewritten.
        ledger_base = previous.ledger_snapshot if previous else None
        grain = self.grain
        state = self._published_state(tables.summary)
        values = {day_partition_value(day, grain) for day in projection.deltas}
        current = state.rows_of(values)
        check_totals(self.spec.name, current, projection.deltas, grain)  # refused before anything is written
        ledger_file = runs = None
        if projection.new_ledger_rows.num_rows:
            rows = _ledger_rows(projection.new_ledger_rows, identity.batch_id, ledger_arrow(tables.ledger))
            ledger_file = FileWriter(tables.ledger.metadata, tables.ledger.io, plain=_LEDGER_PLAIN).submit([(None, rows)])
            runs = self._lookup.submit_runs_after(tables.ledger, ledger_base, projection.new_ledger_rows)
        rewrite = rewrite_partitions(current, projection.deltas, grain, self.spec.name)
        counts = replace(projection.counts, partitions_rewritten=len(rewrite.partitions))
        new_positions = positions.advance(previous.positions if previous else {}, identity.source, identity.end)

        ledger_tx = None
        ledger_snapshot = ledger_base
        if ledger_file is not None and runs is not None:
            ledger_tx = _stage_ledger(tables.ledger, ledger_base, ledger_file, identity.batch_id, runs.result())
            ledger_snapshot = ledger_tx.table_metadata.current_snapshot_id

        new_rows = {partition_value(label, grain): rows for label, rows in rewrite.rows.items()}
        partition_count = (sum(1 for value, rows in state.rows.items() if rows and value not in values)
                           + sum(1 for rows in new_rows.values() if rows))
        record = PublishRecord(
            batch_id=identity.batch_id,
            batch=identity.as_dict(),
            positions=new_positions,
            contract=self.spec.contract.schema_ref,
            schema_id=tables.summary.metadata.current_schema_id,
            checksums=rewrite.checksums,
            counts=counts,
            totals=(previous.totals if previous else Counts()) + counts,
            ledger_snapshot=ledger_snapshot,
            partition_count=partition_count,
        )
        summary_tx = transaction(tables.summary)
        props = record.to_properties()
        new_files = []
        if rewrite.partitions:
            new_files = replace_partitions(summary_tx, tables.summary, state.files_of(values), rewrite.parts, grain,
                                           props)
        else:
            summary_tx.append(SUMMARY_ARROW.empty_table(), snapshot_properties=props)
        fault_point("after-data-write")

        changes = [TableChange(tables.ledger, ledger_tx), TableChange(tables.summary, summary_tx)]
        if self.ordered:
            commit_in_order(self.catalog, changes)
        else:
            commit_atomically(self.catalog, changes)
        fault_point("after-commit")
        snapshot_id = summary_tx.table_metadata.current_snapshot_id
        self._published = state.replaced(snapshot_id, values, new_rows, new_files)
        return PublishResult(
            status="published",
            dataset=self.spec.name,
            batch_id=identity.batch_id,
            snapshot_id=snapshot_id,
            source=identity.source,
            start=positions.normalize(identity.start),
            end=positions.normalize(identity.end),
            positions=new_positions,
            counts=counts,
            partitions=rewrite.partitions,
            attempts=attempt,
        )

    def _published_state(self, summary: Table) -> PublishedState:
        """The published table's rows and files: kept from our last publish if still current."""
        current = summary.metadata.current_snapshot_id
        if current is None:
            return PublishedState(None, {}, {})
        if self._published is None or self._published.snapshot_id != current:
            self._published = published_state.load(summary, self.grain)
        return self._published

    def _already_published(self, identity: BatchIdentity, snapshot_id: int, committed: dict[str, Vector],
                           attempt: int) -> PublishResult:
        return PublishResult(
            status="already-published",
            dataset=self.spec.name,
            batch_id=identity.batch_id,
            snapshot_id=snapshot_id,
            source=identity.source,
            start=positions.normalize(identity.start),
            end=positions.normalize(identity.end),
            positions=committed,
            counts=Counts(),
            attempts=attempt,
        )

    def _backoff(self, attempt: int) -> float:
        wait = min(self.backoff_s * (2 ** (attempt - 1)), self.max_backoff_s)
        return wait + random.uniform(0, wait)

    def _audit(self, identity: BatchIdentity, exc: BlockedError, n_events: int) -> None:
        outcome = "conflict" if isinstance(exc, PayloadConflict) else "stale-start"
        entry = audit.AuditEntry(self.spec.name, identity.source, identity.batch_id, outcome, exc.one_line(), n_events)
        try:
            audit.record(self.catalog, self.namespace, entry)
        except Exception as err:  # the refusal itself must reach the user even if the audit write fails
            warnings.warn(f"could not record the refused batch in the audit table: {err}", stacklevel=2)


def _stage_ledger(ledger: Table, base: int | None, data_file: list[Future[DataFile]], batch_id: str,
                  runs: list[key_index.Run] | None) -> Transaction:
    """A transaction appending the batch's ledger file (once written) on top of snapshot ``base``;
    its summary names the key-index ``runs`` that hold all its rows (if any)."""
    tx = transaction(ledger)
    reset_main(tx, base)  # drops an unpublished append left on the ledger's main
    props = {"lakepub.batch-id": batch_id}
    if runs is not None:
        props[key_index.INDEX_PROPERTY] = key_index.encode(runs)
    append_files(tx, [f.result() for f in data_file], props)
    return tx


def _ledger_rows(rows: pa.Table, batch_id: str, schema: pa.Schema) -> pa.Table:
    """The new ledger rows in ``schema``'s column order (the writer casts them to the table's schema)."""
    columns = {name: rows.column(name) for name in rows.column_names}
    # One dictionary entry: the writer's cast to string (in its pool thread) expands it.
    columns["batch_id"] = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows.num_rows, np.int32)),
                                                         pa.array([batch_id], pa.string()))
    columns["floor"] = pa.nulls(rows.num_rows, pa.int64())
    if HISTORY_ARROW.name in schema.names:  # a compacted ledger: only compaction fills it
        columns[HISTORY_ARROW.name] = pa.nulls(rows.num_rows, HISTORY_ARROW.type)
    return pa.table([columns[name] for name in schema.names], names=schema.names)


def _truncated_history_note(summary: Table, identity: BatchIdentity, committed: Vector) -> str:
    """Say so when the batch may have been published before the retained history begins."""
    oldest = min(summary.metadata.snapshots, key=lambda s: s.sequence_number, default=None)
    if oldest is None or oldest.sequence_number <= 1:
        return ""  # the whole history is there (the first snapshot has sequence number 1)
    if any(offset > committed.get(part, 0) for part, offset in identity.end.items()):
        return ""  # the batch reaches past the committed position: it cannot have been published
    when = oldest.timestamp_ms // 1000
    return (f"snapshots before {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(when))} UTC were expired by the "
            "janitor; if this exact batch was published before then, its events are already included")
