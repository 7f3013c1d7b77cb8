"""The publish protocol, one batch of one entity at a time.

An entity (``EntityGroup``: the datasets that name it) has one ledger and one published table per
dataset; a batch moves all of them in one atomic commit, recording the same positions on each.

1. validate the batch's range (events were validated against the contract when read);
2. the start vector must equal the committed vector of its source, else the batch is either
   already published (same identity in the history: success, nothing to do) or stale (refused);
   then the contract's publish gates (``publish/gating.py``) refuse it (strict) or set the events
   they reject aside (lenient: only the accepted ones are projected; the rejected ones are
   appended to the entity's rejects table in the commit of step 5);
3. project the batch against the ledger (``publish/versioning.py``; conflicts block the publish);
4. every dataset rewrites the partitions the changed entities touch (``publish/datasets.py``;
   its current rows and files are kept between publishes while no one else moves it);
5. write the new files, then commit the ledger and every published table (whose snapshot
   summaries carry the checkpoint) in one atomic catalog commit that asserts each expected parent
   (while a major contract version is in DUAL_WRITE, its ledger and tables too: publish/dual.py);
6. a lost race reloads and starts over from step 2, a bounded number of times with backoff.

A dataset added to an entity that already has history is first built from the ledger at the
current position (``catch_up``), in a commit of its own, then maintained with its siblings.

A crash anywhere before the pointer swap publishes nothing (the files written are orphans for
the janitor); a crash after it is recognised as "already published" on retry.
"""

from __future__ import annotations

import random
import time
import warnings
from dataclasses import replace
from typing import TYPE_CHECKING, Callable

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, Transaction

from lakepub import logs, positions
from lakepub.config import EntityGroup
from lakepub.contract import gates
from lakepub.errors import (
    BlockedError, CommitContention, ConfigError, ForeignChange, GateRefused, InvalidPosition, OutcomeUnknown,
    PayloadConflict, StaleStart,
)
from lakepub.faults import fault_point
from lakepub.identity import BatchIdentity, fingerprint
from lakepub.positions import Vector
from lakepub.publish import evolution, gating
from lakepub.publish.batch import PreparedBatch, PublishResult, prepare  # noqa: F401 - re-exported
from lakepub.publish.dual import Companion, Deferred, refuse_swapped
from lakepub.publish.datasets import DatasetWriter, Rewrite
from lakepub.publish.guards import check_contract
from lakepub.publish.ledger_append import ledger_rows, stage_ledger
from lakepub.publish.lookup import LedgerLookup
from lakepub.publish.rebase import ledger_files_added_since, touches_entities
from lakepub.publish.states import live_states
from lakepub.publish.versioning import Change, Shape, project
from lakepub.store import audit
from lakepub.store.commit import CommitConflict, TableChange, commit_atomically, commit_in_order, commit_mode
from lakepub.store.files import FileWriter
from lakepub.store.layout import ensure_ledger, ledger_arrow, ledger_id, order_keys_version
from lakepub.store.published import ensure_published
from lakepub.store.write import new_snapshot_id
from lakepub.store.record import COMMIT_ATTEMPTS, PUBLISH_STARTED, Counts, PublishRecord, find_batch, latest_published

if TYPE_CHECKING:  # a publish on the key-index path never opens DuckDB: imported on use
    import duckdb

    from lakepub.store.cache import FileCache

Latest = tuple  # (Snapshot, PublishRecord) of a dataset's newest record, or None


class Publisher:
    """Publishes batches of one entity into its ledger and every dataset of it."""

    def __init__(
        self,
        catalog: Catalog,
        namespace: str,
        group: EntityGroup,
        duck_factory: Callable[[], duckdb.DuckDBPyConnection],
        *,
        max_attempts: int = 10,
        backoff_s: float = 0.05,
        max_backoff_s: float = 2.0,
        mode: str = "auto",
        key_index: bool = True,
        cache: FileCache | None = None,
    ):
        """``key_index``: keep and use the ledger's key index (``store/key_index.py``); on an object
        store its runs are kept locally in ``cache`` (none: scanned); False scans the ledger."""
        self.catalog, self.namespace, self.group, self.contract = catalog, namespace, group, group.contract
        self.shape = Shape.of(group.contract)
        # DuckDB (~0.15 s of extension loading) is opened on first use: only a ledger without a
        # key index, a rebase check or building a new dataset needs it.
        self._duck_factory = duck_factory
        self._con: duckdb.DuckDBPyConnection | None = None
        self.max_attempts, self.backoff_s, self.max_backoff_s = max_attempts, backoff_s, max_backoff_s
        self.rebases = 0  # commit races lost and retried, for tests and benchmarks
        self.ordered = commit_mode(catalog, mode) == "ordered"
        if self.ordered and len(group.datasets) > 1:
            raise ConfigError(f"{group.datasets[1].path}: datasets {', '.join(group.dataset_names)} share the entity "
                              f"'{group.name}', which needs the atomic commit of a SQL catalog (SQLite or PostgreSQL) "
                              "so that they never disagree: set commit: atomic (or auto) with a SQL catalog, or give "
                              "each dataset its own entity")
        ledger = ensure_ledger(catalog, namespace, group.name, group.contract)
        # The ledger's entity is still the contract's, or the contract a compatible evolution of it
        # (publish/evolution.py: the schemas evolve with the next batch's data).
        check_contract(group.contract, ledger, lambda: evolution.recorded_ref(catalog, namespace, group, ledger))
        self.writers = {spec.name: DatasetWriter(spec) for spec in group.datasets}
        for spec in group.datasets:  # created if new; a definition that changed under it is refused
            self.writers[spec.name].check_definition(ensure_published(catalog, namespace, spec), ledger)
        self._lookup = LedgerLookup(lambda: self.con, ledger.location(), use_index=key_index, contract=group.contract,
                                    cache=cache)
        self.gate_partitions = gating.partition_columns(group)  # publish gates: publish/gating.py
        gating.ensure_tables(catalog, namespace, group)
        # DUAL_WRITE (publish/dual.py): the new major version's tables, staged into every commit of ours.
        self.companion: Companion | None = None
        self._ledger_uuid = ledger.metadata.table_uuid  # another uuid later: replaced (a DUAL_WRITE swap?)

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            self._con = self._duck_factory()
        return self._con

    def close(self) -> None:
        """Close the DuckDB connection this publisher opened (reopened on next use)."""
        con, self._con = self._con, None
        if con is not None:
            con.close()

    def prepare(self, events: pa.Table) -> PreparedBatch:
        return prepare(events, self.contract)

    # --- tables ---------------------------------------------------------------------------------

    def load(self) -> tuple[Table, dict[str, Table], dict[str, Latest]]:
        """The ledger, every published table and its newest record (each checked: ``guards``)."""
        # The published tables first: the ledger, loaded after them, holds every snapshot their
        # records name (a concurrent publish commits both; loading in the other order could see
        # a record whose ledger snapshot is newer than the ledger's metadata as loaded).
        tables = {name: self.catalog.load_table((self.namespace, name)) for name in self.writers}
        ledger = self.catalog.load_table(ledger_id(self.namespace, self.group.name))
        if ledger.metadata.table_uuid != self._ledger_uuid:
            refuse_swapped(self.catalog, self.namespace, self.group)  # the old version's ledger swapped out
            self._ledger_uuid = ledger.metadata.table_uuid
        latest = {name: latest_published(table) for name, table in tables.items()}
        for name, table in tables.items():
            self.writers[name].check_head(table, ledger, latest[name])
        return ledger, tables, latest

    def checkpoint(self, ledger: Table, latest: dict[str, Latest]) -> tuple[str, PublishRecord] | None:
        """The entity's checkpoint: the newest record of its datasets (None before any publish).
        Datasets whose record lags behind it (``stale_members``) are rebuilt before publishing."""
        recorded = [(name, found[1]) for name, found in latest.items() if found is not None]
        if not recorded:
            return None
        return max(recorded, key=lambda item: _ledger_age(ledger, item[1]))

    def stale_members(self, ledger: Table, latest: dict[str, Latest]) -> list[str]:
        """Datasets to build from the ledger: never published, or left behind (removed from the
        catalog while their siblings published, then restored). A member at the checkpoint's
        ledger snapshot with other positions was changed outside lakepub: refused."""
        checkpoint = self.checkpoint(ledger, latest)
        if checkpoint is None:
            return []
        lead, record = checkpoint
        out = []
        for name, found in latest.items():
            if found is None:
                out.append(name)
                continue
            other = found[1]
            if other.positions == record.positions and other.ledger_snapshot == record.ledger_snapshot:
                continue
            if _ledger_age(ledger, other) < _ledger_age(ledger, record):
                out.append(name)
                continue
            raise ForeignChange(
                f"datasets '{lead}' and '{name}' of entity '{self.group.name}' record different positions "
                f"({positions.dumps(record.positions)} vs {positions.dumps(other.positions)}) at the same ledger "
                "snapshot; they are only ever committed together, so one was changed outside lakepub; nothing "
                "was published")
        return out

    # --- building a new dataset -----------------------------------------------------------------

    def catch_up(self) -> list[str]:
        """Build every dataset of the entity that has no publish yet (or lags behind) while its
        siblings have history, from the ledger at their checkpoint; returns the datasets built."""
        built: list[str] = []
        for attempt in range(1, self.max_attempts + 1):
            ledger, tables, latest = self.load()
            stale = self.stale_members(ledger, latest)
            if not stale:
                return built
            try:
                self._build(ledger, tables, self.checkpoint(ledger, latest), stale[0])
                built.append(stale[0])
                logs.built(stale[0], self.group.name)
            except CommitConflict:
                self.rebases += 1
                time.sleep(self._backoff(attempt))
        raise CommitContention(f"gave up building dataset(s) of entity '{self.group.name}' after "
                               f"{self.max_attempts} attempts: concurrent writers kept moving it; retry")

    def _build(self, ledger: Table, tables: dict[str, Table], checkpoint: tuple[str, PublishRecord], name: str) -> None:
        lead, record = checkpoint
        writer = self.writers[name]
        states = live_states(self.con, ledger, record.ledger_snapshot, self.contract)
        rewrite = writer.rebuild(tables[name], states)  # every partition replaced
        built = PublishRecord(
            batch_id=fingerprint("lakepub-build-v1", name, str(record.ledger_snapshot), record.batch_id),
            batch={"kind": "build", "source": "(build)", "from": lead},
            positions=record.positions,
            contract=self.contract.schema_ref,
            contract_sha256=self.contract.sha256,
            schema_id=tables[name].metadata.current_schema_id,
            checksums=rewrite.checksums,
            counts=Counts(partitions_rewritten=len(rewrite.partitions)),
            totals=Counts(),
            ledger_snapshot=record.ledger_snapshot,
            partition_count=writer.partition_count(tables[name], rewrite),
            data_version=writer.data_version,
        )
        tx, files = writer.stage(tables[name], rewrite, built)
        # The ledger and the dataset it was built beside must not have moved meanwhile.
        commit_atomically(self.catalog, [TableChange(ledger), TableChange(tables[lead]), TableChange(tables[name], tx)])
        writer.committed(tables[name], tx, rewrite, files)

    # --- publishing a batch ---------------------------------------------------------------------

    def publish(self, events: pa.Table | PreparedBatch, *, source: str, start: Vector, end: Vector,
                dataset: str | None = None) -> PublishResult:
        """Publish one batch of the entity's events; ``dataset`` is the one the caller named
        (its snapshot is the result's), default the first of the entity."""
        prepared = events if isinstance(events, PreparedBatch) else self.prepare(events)
        events = prepared.events
        covered = positions.check_range(start, end)
        if covered != events.num_rows:
            raise InvalidPosition(f"batch has {events.num_rows} events but positions {positions.dumps(start)} -> "
                                  f"{positions.dumps(end)} cover {covered} records")
        identity = BatchIdentity(self.group.name, source, start, end, prepared.digest)
        dataset = dataset or self.group.dataset_names[0]
        logs.batch_started(dataset, identity.batch_id, source, start, end, events.num_rows)
        started = time.time()  # recorded on the snapshot: its timestamp minus this is the publish's duration
        began = time.perf_counter()
        try:  # a dataset to build first (new, or left behind) is built by the loop's first attempt
            result = self._publish_with_retries(prepared, identity, dataset, started)
        except BlockedError as exc:
            self._audit(identity, exc, events.num_rows)
            logs.refused(dataset, identity.batch_id, source, exc)
            raise
        logs.batch_done(result, time.perf_counter() - began)
        return result

    def _publish_with_retries(self, prepared: PreparedBatch, identity: BatchIdentity, dataset: str,
                              started: float) -> PublishResult:
        events = prepared.events
        original = prepared  # the batch before a gate verdict filtered it
        gate: gates.Outcome | None = None  # what the publish gates add to a lenient publish
        checked_on: tuple[str, ...] | None = None  # the published tables a unique-over-output check read
        change: Change | None = None
        base_ledger: int | None = None
        for attempt in range(1, self.max_attempts + 1):
            ledger, tables, latest = self.load()
            if self.stale_members(ledger, latest):  # a member left behind meanwhile: build it first
                self.catch_up()
                continue
            checkpoint = self.checkpoint(ledger, latest)
            previous = checkpoint[1] if checkpoint else None
            done = self._check_position(tables[dataset], previous, identity, attempt, dataset)
            if done is not None:
                return done
            for name, table in tables.items():  # a new batch (in a new process): rows read during the lookup
                self.writers[name].prefetch(table)
            basis = gating.unique_basis(self.group, tables) if original.verdict is not None else None
            if original.verdict is not None and (gate is None or basis != checked_on):
                # A new batch, or a retry after a concurrent publish moved the rows a unique rule
                # is checked against: refused here (strict) or let through, with its verdict anew.
                if gate is not None:
                    change = None  # the accepted events may differ: project again
                prepared, gate = gating.check(self.catalog, self.namespace, self.group, lambda: self.con, original,
                                              self.gate_partitions)
                checked_on = basis
            # The ledger snapshot the published tables name: under the atomic commit it is the
            # ledger's main; after an ordered-mode crash (or a switch of mode) main may hold an
            # append no publish names, so the recorded snapshot is read and built on, in both modes.
            head = previous.ledger_snapshot if previous else None
            if change is not None and not self._commutes(ledger, base_ledger, head, events):
                change = None  # a concurrent publish touched our entities: recompute
            if change is None:
                found = self._lookup.rows(ledger, head, prepared.side)
                change = project(prepared.side, found, order_keys_version(ledger),
                                 evolution.float_widened(ledger, self.contract))
                base_ledger = head
                logs.projected(dataset, identity.batch_id, attempt, head, change.new_ledger_rows.num_rows)
            try:
                return self._attempt(ledger, tables, latest, previous, change, identity, attempt, dataset, started,
                                     gate, events.num_rows)
            except CommitConflict:
                self.rebases += 1
                wait = self._backoff(attempt)
                logs.commit_retry(dataset, identity.batch_id, attempt, wait)
                time.sleep(wait)
            except OutcomeUnknown:
                # The database may have committed. Its state is definite now: look it up.
                found_batch = find_batch(self.catalog.load_table(tables[dataset].name()), identity.batch_id)
                if found_batch is None:
                    raise
                return self._already_published(identity, found_batch[0].snapshot_id, found_batch[1].positions,
                                               attempt, dataset)
        raise CommitContention(
            f"gave up after {self.max_attempts} attempts: concurrent writers kept moving entity "
            f"'{self.group.name}'; nothing was published by this batch, retry it"
        )

    def _check_position(self, table: Table, record: PublishRecord | None, identity: BatchIdentity,
                        attempt: int, dataset: str) -> PublishResult | None:
        committed = (record.positions if record else {}).get(identity.source, {})
        if positions.same_position(identity.start, committed):
            return None
        found = find_batch(table, identity.batch_id)
        if found is not None:
            return self._already_published(identity, found[0].snapshot_id, found[1].positions, attempt, dataset)
        raise StaleStart(identity.source, positions.normalize(identity.start), positions.normalize(committed),
                         _truncated_history_note(table, identity, committed))

    def _commutes(self, ledger: Table, base_snapshot_id: int | None, head_snapshot_id: int | None,
                  events: pa.Table) -> bool:
        """Whether the ledger commits between our base and the new head touched none of our entities."""
        if head_snapshot_id == base_snapshot_id:
            return True
        import duckdb  # loaded by self.con already

        self.con.register("lp_rebase_events", events)
        try:
            files = ledger_files_added_since(ledger, base_snapshot_id, head_snapshot_id)
            return files is not None and not touches_entities(self.con, files, "lp_rebase_events", self.shape.key)
        except (OSError, duckdb.IOException):  # e.g. manifests of an expired snapshot already removed
            return False
        finally:
            self.con.unregister("lp_rebase_events")

    def _attempt(self, ledger: Table, tables: dict[str, Table], latest: dict[str, Latest],
                 previous: PublishRecord | None, change: Change, identity: BatchIdentity, attempt: int,
                 dataset: str, started: float, gate: gates.Outcome | None = None, n_events: int = 0,
                 defer: bool = False) -> PublishResult | Deferred:
        """Write and commit one attempt; ``defer``: write and stage only, and return the changes
        for another publisher's commit (``publish/dual.py``) with what to do once it landed."""
        if gate is not None:  # the batch's events, rejected ones included, and what the gates did
            change = replace(change, counts=replace(change.counts, events=n_events, **gate.counts))
        if self.companion is not None and not defer:  # DUAL_WRITE: the new version's side staged meanwhile
            self.companion.begin(identity)
        # Every dataset's new partitions first: a refusal (a sum out of range) writes nothing.
        rewrites: dict[str, Rewrite] = {name: writer.rewrite(tables[name], change)
                                        for name, writer in self.writers.items()}
        # A compatible new contract version: schema updates staged first, in this commit's transactions.
        ledger_tx, txs = evolution.begin(self.contract, self.writers, ledger, tables, rewrites)
        # The ledger's new data file, its key-index run and the partitions' files are all written in
        # the background at once (a batch spread over years rewrites ~36 partitions); the ledger
        # file is submitted first, as it is the biggest and the first one waited for.
        ledger_base = previous.ledger_snapshot if previous else None
        ledger_file = runs = None
        if change.new_ledger_rows.num_rows:
            rows = ledger_rows(change.new_ledger_rows, identity.batch_id, ledger_arrow(ledger, self.contract))
            plain = (*self.shape.key, "k1", "k2")
            metadata = ledger_tx.table_metadata if ledger_tx is not None else ledger.metadata
            ledger_file = FileWriter(metadata, ledger.io, plain=plain).submit([(None, rows)])
            runs = self._lookup.submit_runs_after(ledger, ledger_base, change.new_ledger_rows)
        files = {name: writer.write_files(evolution.evolved(tables[name], txs[name]) if name in txs else tables[name],
                                          rewrites[name]) for name, writer in self.writers.items()}
        new_positions = positions.advance(previous.positions if previous else {}, identity.source, identity.end)

        # The published tables are staged first (their manifests are Python work) while the ledger
        # file and its key-index run are still being written; their records name the ledger
        # snapshot staged after them, whose id is chosen now.
        ledger_snapshot = ledger_base
        if ledger_file is not None and runs is not None:
            ledger_snapshot = new_snapshot_id(ledger, ledger_tx)

        staged: dict[str, tuple[Transaction, list[DataFile]]] = {}
        timing = {PUBLISH_STARTED: str(int(started * 1000)), COMMIT_ATTEMPTS: str(attempt)}  # metrics, report
        for name, writer in self.writers.items():
            counts = replace(change.counts, partitions_rewritten=len(rewrites[name].partitions))
            own = latest[name][1] if latest[name] is not None else None
            record = PublishRecord(
                batch_id=identity.batch_id,
                batch=identity.as_dict(),
                positions=new_positions,
                contract=self.contract.schema_ref,
                contract_sha256=self.contract.sha256,
                schema_id=(txs[name].table_metadata if name in txs else tables[name].metadata).current_schema_id,
                checksums=rewrites[name].checksums,
                counts=counts,
                totals=(own.totals if own else Counts()) + counts,
                ledger_snapshot=ledger_snapshot,
                partition_count=writer.partition_count(tables[name], rewrites[name]),
                extra={**timing, **(gate.properties if gate is not None else {})},
                data_version=writer.data_version,
            )
            staged[name] = writer.stage(tables[name], rewrites[name], record, files[name], txs.get(name))
        if ledger_file is not None and runs is not None:
            ledger_tx = stage_ledger(ledger, ledger_base, ledger_file, identity.batch_id, runs, ledger_tx, ledger_snapshot)
        changes = [TableChange(ledger, ledger_tx), *(TableChange(tables[n], staged[n][0]) for n in self.writers)]
        rejected = gating.rejects_change(self.catalog, self.namespace, self.group.name, identity, gate)
        if rejected is not None:  # one more table in the same commit (ordered: before the published tables)
            changes.insert(1, rejected)

        def done() -> PublishResult:
            snapshots = {name: writer.committed(tables[name], staged[name][0], rewrites[name], staged[name][1])
                         for name, writer in self.writers.items()}
            return self._published(identity, dataset, snapshots, new_positions, change, rewrites, attempt)

        if defer:
            return Deferred(changes, done)
        joined = self.companion.join() if self.companion is not None else None
        if joined is not None:  # the new major version's tables move in the same atomic commit
            changes += joined.changes
        fault_point("after-data-write")

        if self.ordered:
            commit_in_order(self.catalog, changes)
        else:
            commit_atomically(self.catalog, changes)
        fault_point("after-commit")
        if joined is not None:
            joined.done()
        return done()

    def _published(self, identity: BatchIdentity, dataset: str, snapshots: dict[str, int | None],
                   new_positions: dict[str, Vector], change: Change, rewrites: dict[str, Rewrite],
                   attempt: int) -> PublishResult:
        return PublishResult(
            status="published",
            dataset=dataset,
            batch_id=identity.batch_id,
            snapshot_id=snapshots[dataset],
            source=identity.source,
            start=positions.normalize(identity.start),
            end=positions.normalize(identity.end),
            positions=new_positions,
            counts=replace(change.counts, partitions_rewritten=len(rewrites[dataset].partitions)),
            partitions=rewrites[dataset].partitions,
            attempts=attempt,
            datasets={name: r.partitions for name, r in rewrites.items()},
        )

    def _already_published(self, identity: BatchIdentity, snapshot_id: int, committed: dict[str, Vector],
                           attempt: int, dataset: str) -> PublishResult:
        return PublishResult(
            status="already-published",
            dataset=dataset,
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
        outcome = ("conflict" if isinstance(exc, PayloadConflict) else "gate-refused" if isinstance(exc, GateRefused)
                   else "stale-start")
        entry = audit.AuditEntry(self.group.name, identity.source, identity.batch_id, outcome, exc.one_line(), n_events)
        try:
            audit.record(self.catalog, self.namespace, entry)
        except Exception as err:  # the refusal itself must reach the user even if the audit write fails
            warnings.warn(f"could not record the refused batch in the audit table: {err}", stacklevel=2)


def _ledger_age(ledger: Table, record: PublishRecord) -> int:
    """How far the ledger had got when ``record`` was committed (its ledger snapshot's sequence
    number; 0 before the first, -1 if that snapshot was expired since)."""
    if record.ledger_snapshot is None:
        return 0
    snapshot = ledger.snapshot_by_id(record.ledger_snapshot)
    return snapshot.sequence_number if snapshot is not None else -1


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
