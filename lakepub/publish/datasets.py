"""One dataset of an entity inside a publish: its changed partitions, rewritten copy-on-write.

A publish projects a batch once per entity (``publish/versioning.py``: the before and after
states of the entities it changes); every dataset of the entity turns those into its own change
rows (``Kind.changes``), merges them into the current rows of the partitions they touch
(``Kind.apply``) and replaces those partitions' files. Only partitions holding a changed row are
rewritten; an entity that moves to another partition retracts from the old one and adds to the
new one in the same commit. Each rewritten partition's checksum is recorded (its first 64 bits).
A ``current`` dataset records the version 2 checksum instead (``projection/checksum.py``: a sum
of row hashes), updated from the partition's previous sum with only the rows the batch removes
and adds (``_sums``), in both write modes: a publish no longer rehashes the partitions it touches.
The previous sums are kept with the published state (computed from its rows once per process for
a partition, when first needed); a sum computed from rows read back is first compared with the
partition's recorded version 2 checksum (``_check_loaded_sums``): a file changed in place, which
no foreign snapshot reveals, is refused (exit 3) instead of being summed and recorded as verified.

A ``current`` dataset with ``write_mode: merge-on-read`` writes only the changed rows and
position deletes of the rows they replace (``publish/merge_on_read.py``); its checksums are the
same, over the merged rows. A table holding delete files (merge-on-read, or a dataset switched
back to copy-on-write) is committed through ``store/deletes.stage_row_delta``, which carries them
over, or drops those of the partitions a copy-on-write publish replaces.

Refusals (a sum leaving its column's range) happen in ``rewrite``, before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, Transaction

from lakepub.config import DatasetSpec
from lakepub.errors import ForeignChange
from lakepub.identity import RECORDED_CHECKSUM_HEX
from lakepub.projection import checksum
from lakepub.projection.checksum import partition_checksum
from lakepub.projection.current import CHANGE_SIGN, Current
from lakepub.publish import merge_on_read, published_state
from lakepub.publish.guards import check_definition, check_file_specs, check_foreign, check_schemas
from lakepub.publish.mor_index import row_count
from lakepub.publish.published_state import PublishedState, split
from lakepub.publish.versioning import Change
from lakepub.store.deletes import is_delete, stage_row_delta, submit_deletes
from lakepub.store.record import PublishRecord
from lakepub.store.write import replace_partitions, submit_partitions, transaction


@dataclass(frozen=True)
class Rewrite:
    values: frozenset[Any]  # Iceberg partition values rewritten (None: the unpartitioned table)
    rows: dict[Any, pa.Table]  # their new rows (empty for a partition left empty)
    checksums: dict[str, str]  # partition label -> recorded checksum of its new rows
    partitions: list[str]  # labels, sorted
    delta: merge_on_read.Delta | None = None  # merge-on-read: what is written instead of ``rows``
    sums: dict[Any, int] | None = None  # version 2 checksum sums of ``rows`` (``current`` datasets)


# One thread: a new process's first publish reads its published tables' rows while it looks up
# the ledger (``DatasetWriter.prefetch``).
_PREFETCH = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakepub-state")


class DatasetWriter:
    """Publishes one dataset's part of each batch; keeps its published state between publishes."""

    def __init__(self, spec: DatasetSpec):
        self.spec = spec
        self.schema = spec.kind.output_schema()
        self._state: PublishedState | None = None
        self._loading: tuple[int, Future[PublishedState]] | None = None  # ``prefetch``: (snapshot, its read)
        self._vetted: int | None = None  # a foreign head whose data were found to be the published data
        self._checked: tuple[str, str] | None = None  # metadata locations whose schemas and definition passed
        from lakepub.ops.data_version import of_spec

        self.data_version = of_spec(spec)  # recorded on every snapshot it publishes (lakepub.data-version)
        self.merge_on_read = spec.write_mode == "merge-on-read"
        self._key = tuple(spec.kind.row_key)

    def state(self, table: Table) -> PublishedState:
        """The published rows and files: kept from our last publish if still current."""
        current = table.metadata.current_snapshot_id
        if current is None:
            return PublishedState(None, self.schema, {}, {}, {}, {} if self.merge_on_read else None)
        if self._state is None or self._state.snapshot_id != current:
            loading, self._loading = self._loading, None
            if loading is not None and loading[0] == current:  # read by ``prefetch`` meanwhile
                self._state = loading[1].result()
            else:
                self._state = self._load(table)
        return self._state

    def prefetch(self, table: Table) -> None:
        """Start reading the published rows in the background when none are kept for the table's
        current snapshot (a new process, or after another writer): the ledger lookup and the
        projection run meanwhile, and ``state`` takes the result (or its error)."""
        current = table.metadata.current_snapshot_id
        if current is None or (self._state is not None and self._state.snapshot_id == current) or \
                (self._loading is not None and self._loading[0] == current):
            return
        self._loading = (current, _PREFETCH.submit(self._load, table))

    def _load(self, table: Table) -> PublishedState:
        return published_state.load(table, self.schema, self.spec.partition, self._key if self.merge_on_read else None)

    def check_definition(self, table: Table, ledger: Table | None = None) -> None:
        check_definition(self.spec, table, ledger)

    def check_head(self, table: Table, ledger: Table, latest: tuple | None) -> None:
        """Build only on published data (``publish/guards.py``): both tables have lakepub's
        schemas, the table is still what the definition declares, a head written by another tool
        holds exactly the published data (its rows as read: a row appended twice counts twice),
        and after a foreign evolution of the partition spec no live file has another spec."""
        checked = (table.metadata_location, ledger.metadata_location)
        if checked != self._checked:  # a metadata file never changes: checked once per version of both
            check_schemas(self.spec, table, ledger)
            check_definition(self.spec, table, ledger)
            self._checked = checked
        current = table.metadata.current_snapshot_id
        if current is None:
            return
        if current != self._vetted and (latest is None or latest[0].snapshot_id != current):
            check_foreign(table, latest, self.state(table).all_rows(), self.spec.partition)
            self._vetted = current
        if len(table.metadata.partition_specs) > 1:
            check_file_specs(table, (f for files in self.state(table).files.values() for f in files))

    def partition_count(self, table: Table, rewrite: Rewrite) -> int:
        """The number of non-empty partitions after ``rewrite`` (recorded: ``guards``)."""
        state = self.state(table)  # counted without materialising merge-on-read rows (``mor_index``)
        kept = sum(1 for value in state.rows if value not in rewrite.values and row_count(state.rows, value))
        return kept + sum(1 for value in rewrite.rows if row_count(rewrite.rows, value))

    def rewrite(self, table: Table, change: Change) -> Rewrite:
        """The new content of every partition the batch changes (nothing written yet)."""
        kind, partition = self.spec.kind, self.spec.partition
        changes = kind.changes(change.before, change.after)
        if not changes.num_rows:
            return Rewrite(frozenset(), {}, {}, [])
        values = frozenset(partition.values(changes).to_pylist()) if partition.kind != "none" else frozenset([None])
        _refuse_null_text(self.spec, values)
        state = self.state(table)
        delta = None
        if self.merge_on_read and state.located is not None:
            delta = merge_on_read.delta(state, changes, values, self._key, self.schema, partition)
            rows = merge_on_read.merged(state, delta, values, self.schema)  # ``Kind.apply``'s rows, lazily
            delta = merge_on_read.bounded(state, delta, rows, self.spec.fold_threshold)
        else:
            by_value = split(kind.apply(state.rows_of(values), changes), partition)
            rows = {v: by_value.get(v, self.schema.empty_table()) for v in values}
        if isinstance(kind, Current):
            self._check_loaded_sums(table, state, values)
            sums = self._sums(state, changes, values, delta)
            checksums = {partition.label(v): checksum.format_v2(total) for v, total in sums.items()}
            return Rewrite(values, rows, checksums, sorted(checksums), delta, sums)
        checksums = {partition.label(v): partition_checksum(r)[:RECORDED_CHECKSUM_HEX] for v, r in rows.items()}
        return Rewrite(values, rows, checksums, sorted(checksums), delta)

    def _sums(self, state: PublishedState, changes: pa.Table, values: frozenset[Any],
              delta: merge_on_read.Delta | None) -> dict[Any, int]:
        """Each partition's version 2 sum after the batch, from its sum before: minus the rows
        the batch replaces (merge-on-read: the located rows it deletes; copy-on-write: the rows
        whose key the change rows name, as ``Current.apply`` drops them), plus its new rows."""
        signs = changes.column(CHANGE_SIGN)
        added = split(changes.filter(pc.equal(signs, 1)).select(self.schema.names).cast(self.schema),
                      self.spec.partition)
        if delta is not None:
            # a take of the few replaced rows, not a filter pass over the partition (0.28 s at 10M rows)
            removed = merge_on_read.removed_rows(state, delta)
        else:  # one semi join over the affected partitions (a row's partition is in its columns)
            before = state.rows_of(values)
            hit = before.join(changes.select(list(self._key)), keys=list(self._key), join_type="left semi",
                              use_threads=False) if before.num_rows else before
            removed = split(hit.select(self.schema.names), self.spec.partition)
        return {v: checksum.updated(state.sum_of(v), removed.get(v), added.get(v)) for v in values}

    def _check_loaded_sums(self, table: Table, state: PublishedState, values: frozenset[Any]) -> None:
        """Refuse (``ForeignChange``) to build on rows read from the table that do not give the
        version 2 checksum recorded for their partition: a file changed in place (no snapshot, so
        no foreign head) would otherwise be summed as published and recorded as verified. The sum
        is computed anyway (``sum_of``, once per loaded partition); only partitions holding rows
        whose newest record is version 2, and not while an evolution is pending (the rows read
        are then conformed to the new schema, which renders differently)."""
        fresh = [v for v in values if v not in state.sums and v in state.rows]
        if not fresh or state.snapshot_id is None:
            return
        from lakepub.projection.checksum import is_v2
        from lakepub.publish.evolution import plan
        from lakepub.store.published import published_schema
        from lakepub.store.record import recorded_checksums

        recorded = recorded_checksums(table)
        label = self.spec.partition.label
        fresh = [v for v in fresh if is_v2(recorded.get(label(v), ""))]
        if not fresh or not plan(table, published_schema(self.spec)).empty:
            return
        for v in fresh:
            actual = checksum.format_v2(state.sum_of(v))
            if actual != recorded[label(v)]:
                raise ForeignChange(
                    f"dataset '{self.spec.name}': partition {label(v)} of the published table does not match its "
                    f"recorded checksum ({actual[:15]} != {recorded[label(v)][:15]}) although no other tool "
                    f"committed to it: its files were changed in place; nothing was published: {self._repair()}")

    def _repair(self) -> str:
        """What to do about a table whose files were changed in place: verify and rebuild name
        configured datasets, not a DUAL_WRITE version's ``<dataset>__v<M>`` table (``publish/dual.py``),
        which the next run builds again from the landing once its tables are dropped."""
        from lakepub.publish.dual import DUAL_WRITE, suffix

        tail = suffix(self.spec.contract)
        if (self.spec.contract.terms.status or "") == DUAL_WRITE and self.spec.name.endswith(tail):
            return (f"it is a table of the {self.spec.contract.schema_ref} version built beside "
                    f"'{self.spec.name[:-len(tail)]}': restore the files or roll it back to a snapshot that "
                    f"verifies, or drop every '{tail}' table of entity '{self.spec.entity}' ({self.spec.name}, "
                    f"{self.spec.entity}{tail}__ledger, ...) and 'lakepub run' builds them again from the landing")
        # not 'lakepub rebuild': under an unchanged definition it has nothing to rebuild (a no-op)
        return (f"run 'lakepub verify {self.spec.name}', restore the files or roll the table back to a snapshot "
                f"that verifies, then publish again (the batches after it are published again from the ledger "
                f"snapshot its record names)")

    def rebuild(self, table: Table, states: pa.Table) -> Rewrite:
        """The whole table from the live states of every entity: every current partition replaced."""
        partition = self.spec.partition
        by_value = split(self.spec.kind.build(states), partition)
        _refuse_null_text(self.spec, by_value)
        values = frozenset(self.state(table).rows) | frozenset(by_value)
        rows = {v: by_value.get(v, self.schema.empty_table()) for v in values}
        checksums = {partition.label(v): partition_checksum(r)[:RECORDED_CHECKSUM_HEX] for v, r in rows.items()}
        return Rewrite(values, rows, checksums, sorted(checksums))

    def write_files(self, table: Table, rewrite: Rewrite) -> list[Future[DataFile]]:
        """Start writing the rewritten partitions' data files in the background (for ``stage``);
        merge-on-read: the new rows' data files and the delete files."""
        if rewrite.delta is not None:
            delta = rewrite.delta
            return (submit_partitions(table, {v: r for v, r in delta.added.items() if r.num_rows})
                    + submit_deletes(table.metadata, table.io, delta.deleted))
        return submit_partitions(table, {v: r for v, r in rewrite.rows.items() if r.num_rows}) if rewrite.values else []

    def stage(self, table: Table, rewrite: Rewrite, record: PublishRecord,
              files: list[Future[DataFile]] | None = None,
              tx: Transaction | None = None) -> tuple[Transaction, list[DataFile]]:
        """A transaction replacing the rewritten partitions, its snapshot carrying ``record``;
        ``files``: what ``write_files`` started for this rewrite (else they are written now);
        ``tx``: one holding a schema evolution already (``publish/evolution.py``)."""
        tx = tx if tx is not None else transaction(table)
        props = record.to_properties()
        state = self.state(table)
        if rewrite.values and (rewrite.delta is not None or state.deletes):
            if files is None:
                files = self.write_files(table, rewrite)
            written = [f.result() for f in files]
            new_data = [f for f in written if not is_delete(f)]
            new_deletes = [f for f in written if is_delete(f)]
            # merge-on-read: the partitions rewritten whole or folded (``bounded``) drop files; else
            # whole partitions replaced on a table with delete files: theirs go with them
            delta = rewrite.delta
            remove_data, remove_deletes = (merge_on_read.dropped_files(state, delta.whole, delta.folded)
                                           if delta is not None else merge_on_read.dropped_files(state, rewrite.values))
            stage_row_delta(tx, table, add_data=new_data, add_deletes=new_deletes, remove_data=remove_data,
                            remove_deletes=remove_deletes, snapshot_properties=props)
            return tx, written
        if rewrite.values:
            parts = files if files is not None else {v: r for v, r in rewrite.rows.items() if r.num_rows}
            return tx, replace_partitions(tx, table, self.state(table).files_of(rewrite.values), parts, props)
        tx.append(self.schema.empty_table(), snapshot_properties=props)
        return tx, []

    def committed(self, table: Table, tx: Transaction, rewrite: Rewrite, new_files: list[DataFile]) -> int:
        """Remember the state after our commit; returns the new snapshot id."""
        snapshot_id = tx.table_metadata.current_snapshot_id
        state = self.state(table)
        if self.merge_on_read or state.deletes:
            data = [f for f in new_files if not is_delete(f)]
            deletes = [f for f in new_files if is_delete(f)]
            if self.merge_on_read and (state.located is not None or state.snapshot_id is None):
                self._state = merge_on_read.after_commit(state, snapshot_id, rewrite.values, rewrite.rows, self._key,
                                                         data, deletes, rewrite.delta, rewrite.delta is None)
                self._state.carry_sums(state, rewrite.values, rewrite.sums)
                return snapshot_id
            self._state = None  # read again by the next publish
            return snapshot_id
        self._state = state.replaced(snapshot_id, set(rewrite.values), rewrite.rows, new_files)
        self._state.carry_sums(state, rewrite.values, rewrite.sums)
        return snapshot_id


def _refuse_null_text(spec: DatasetSpec, values: Any) -> None:
    """Refuse (exit 3) the text ``null`` as an identity partition value: Iceberg's human string
    of it is the null partition's label (``null``), under which checksums are recorded, verified
    and read by derived datasets and sensors; two partitions would share one label."""
    if spec.partition.kind == "identity" and "null" in values:
        from lakepub.errors import BlockedError

        raise BlockedError(
            f"dataset '{spec.name}': a row has the text 'null' in its partition column ({spec.partition}), which "
            f"would share the label 'null' of the partition of null values (checksums, verify, derived datasets "
            f"and sensors name partitions by label); nothing was published: map that value upstream or "
            f"partition the dataset by another column")
