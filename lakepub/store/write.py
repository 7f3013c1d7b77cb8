"""Writing the affected partitions of the published table as ONE overwrite snapshot.

pyiceberg's ``Transaction.overwrite`` makes two snapshots (a delete, then an append), each
copying the table metadata. A publish only ever replaces whole partitions, so the files to drop
are exactly the current files whose partition value is one of the rewritten partitions, and one
``overwrite`` snapshot can delete them and add the new files.

The files are chosen by their partition value rather than by planning a scan with a row filter:
pyiceberg evaluates such a filter per manifest entry in Python, which cost ~0.35 s per publish
over 36 partitions, against ~0.02 s for planning without a filter.

The published table is small (a row per day), but pyiceberg's overwrite keeps every manifest
it does not touch, so a table rewritten partition by partition ends up with about one manifest
per publish, which every reader must open. The overwrite here writes the surviving, deleted and
added entries into one manifest instead, so a snapshot lists one manifest whatever the history.

Its entries are encoded as one Avro block (``add_in_one_block``; pyiceberg writes a block per
entry). A ledger append may be given its snapshot id beforehand (``new_snapshot_id``,
``append_files``), so that a publish stages the published tables, whose records name that ledger
snapshot, while the ledger's own file is still being written. A derived window that replaces no
file stages a fast append (``fast_append``: its manifest as one block, the summary's partition type
bound once; ~14 ms instead of pyiceberg's ~23 ms for 365 files). Both snapshots' summaries bind
each spec's partition type once (``_BoundSummary``: 0.7 instead of 2.1 ms of CPU for a publish
adding 36 files and deleting 36).

The data files are written by ``store.files.FileWriter``; transactions are ``MemoTransaction``.
"""

from __future__ import annotations

from concurrent.futures import Future
from datetime import datetime
from typing import Any

import pyarrow as pa
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DataFile,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
)
from pyiceberg.table import Table, TableProperties, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.update import _apply_table_update, _TableMetadataUpdateContext, _update_table_metadata_log
from pyiceberg.utils.datetime import datetime_to_millis
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table.snapshots import Operation, SnapshotSummaryCollector, Summary, update_snapshot_summaries
from pyiceberg.typedef import EMPTY_DICT
from pyiceberg.typedef import Record
from pyiceberg.table.update.snapshot import _FastAppendFiles, _OverwriteFiles

from lakepub.errors import LakepubError
from lakepub.store.files import FileWriter


class MemoTransaction(Transaction):
    """A ``Transaction`` that computes its staged metadata once per change.

    pyiceberg's ``Transaction.table_metadata`` applies every staged update to the base metadata
    and deep-copies the result on each access; staging one snapshot reads it ~20 times, and the
    copy grows with the table's snapshot history (~60 ms per publish after a few hundred). The
    staged updates only change through ``_stage`` (which replaces the ``_updates`` tuple), so the
    result is remembered until they change. Metadata models are not mutated by their readers.
    """

    _memo: tuple[tuple, TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        memo = self._memo
        if memo is None or memo[0] is not self._updates:
            memo = self._memo = (self._updates, staged_metadata(self._table.metadata, self._updates))
        return memo[1]


def staged_metadata(base: TableMetadata, updates: tuple, metadata_location: str | None = None) -> TableMetadata:
    """``pyiceberg.table.update.update_table_metadata`` (no validation) without its closing deep copy.

    Every update pyiceberg applies returns a new model (``model_copy(update=...)`` with new lists
    and dicts) and leaves ``base`` as it was, so the result needs no deep copy of its own; that
    copy is of the whole metadata, snapshot summaries included, and cost ~45 ms of CPU per publish
    of a batch spread over 36 partitions (its records name 36 checksums), three to six times per
    publish. ``tests/test_write_path.py`` compares the result with pyiceberg's.
    """
    context = _TableMetadataUpdateContext()
    new = base
    for update in updates:
        new = _apply_table_update(update, new, context)
    if context.has_changes():
        if metadata_location:
            new = _update_table_metadata_log(new, metadata_location, base.last_updated_ms)
        if base.last_updated_ms == new.last_updated_ms:
            new = new.model_copy(update={"last_updated_ms": datetime_to_millis(datetime.now().astimezone())})
    new.spec().check_compatible(new.schema())
    new.sort_order().check_compatible(new.schema())
    return new


def transaction(table: Table) -> Transaction:
    """A transaction on ``table`` (``MemoTransaction``)."""
    return MemoTransaction(table)


def submit_partitions(table: Table, parts: dict[Any, pa.Table]) -> list[Future[DataFile]]:
    """Start writing a data file per partition of ``parts`` for ``table`` at its current metadata,
    in ``FileWriter``'s pool: a publish submits them as soon as it knows the partitions' rows, so
    the 30-40 small files of a batch spread over years are encoded while the ledger file and its
    key-index run are written, instead of after them (``replace_partitions`` takes the futures).

    ``parts`` maps an Iceberg partition value (None: the table is unpartitioned) to its new rows
    (a rewritten partition left empty has no entry).
    """
    writer = FileWriter(table.metadata, table.io)
    partitioned = bool(table.metadata.spec().fields)
    return writer.submit([(Record(value) if partitioned else Record(), rows)
                          for value, rows in sorted(parts.items(), key=lambda kv: _order(kv[0]))])


def replace_partitions(tx: Transaction, table: Table, old_files: list[DataFile],
                       parts: dict[Any, pa.Table] | list[Future[DataFile]],
                       snapshot_properties: dict[str, str]) -> list[DataFile]:
    """Stage in ``tx`` one snapshot deleting ``old_files`` and adding a file per partition of ``parts``.

    ``old_files`` are the current files of the rewritten partitions; ``parts`` maps an Iceberg
    partition value (None: the table is unpartitioned) to its new rows (a rewritten partition left
    empty has no entry), or is what ``submit_partitions`` returned for them on the same table
    version. Returns the new files.
    """
    if isinstance(parts, dict):
        parts = submit_partitions(table, parts)
    new_files = [f.result() for f in parts]
    operation = Operation.OVERWRITE if tx.table_metadata.current_snapshot_id is not None else Operation.APPEND
    with _CompactingOverwrite(operation=operation, transaction=tx, io=table.io, branch=MAIN_BRANCH,
                              snapshot_properties=snapshot_properties) as overwrite:
        for data_file in old_files:
            overwrite.delete_data_file(data_file)
        for data_file in new_files:
            overwrite.append_data_file(data_file)
    return new_files


def new_snapshot_id(table: Table, tx: Transaction | None = None) -> int:
    """An id for a snapshot still to be staged on ``table`` (in ``tx`` if given; ``append_files``
    takes it), unused by its snapshots, drawn the way pyiceberg draws them."""
    return (tx.table_metadata if tx is not None else table.metadata).new_snapshot_id()


def _order(value: Any) -> tuple[bool, Any]:
    return (value is None, value if value is not None else 0)


def append_files(tx: Transaction, data_files: list[DataFile], snapshot_properties: dict[str, str],
                 snapshot_id: int | None = None) -> None:
    """Stage in ``tx`` one append snapshot of ``data_files`` (written by ``FileWriter``).

    Like ``Transaction.append``: manifests are merged when the table's properties ask for it.
    ``snapshot_id``: the new snapshot's id, chosen beforehand (``new_snapshot_id``) so that other
    tables of the same commit can name it before this one is staged; else pyiceberg draws one.
    """
    update = tx.update_snapshot(snapshot_properties=snapshot_properties)
    merge = tx.table_metadata.properties.get(TableProperties.MANIFEST_MERGE_ENABLED, "false").lower() == "true"
    with (update.merge_append() if merge else update.fast_append()) as append:
        if snapshot_id is not None:
            if tx.table_metadata.snapshot_by_id(snapshot_id) is not None:
                raise ValueError(f"snapshot id {snapshot_id} is already in use")
            # drawn in the producer's __init__ and only read when it commits (pinned with pyiceberg)
            append._snapshot_id = snapshot_id  # noqa: SLF001
        for data_file in data_files:
            append.append_data_file(data_file)


class _BoundSummary:
    """pyiceberg's ``SnapshotProducer._summary`` with each partition spec's partition type bound
    once per snapshot instead of per file: ``PartitionSpec.partition_to_path`` rebuilds it (a
    schema visit) for every added and every deleted file, which for a publish rewriting 36
    partitions (36 files added, 36 deleted) was ~20 ms of CPU on the committing thread, ~6 ms for
    the 365 files of a derived window's fast append. Same collector, same order, same summary:
    ``tests/test_write_path.py`` compares it with pyiceberg's for both producers."""

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        metadata = self._transaction.table_metadata  # type: ignore[attr-defined]
        schema = metadata.schema()
        limit = int(metadata.properties.get(TableProperties.WRITE_PARTITION_SUMMARY_LIMIT,
                                            TableProperties.WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT))
        collector = SnapshotSummaryCollector(partition_summary_limit=limit)
        specs = metadata.specs()
        bound: dict[int, _BoundSpec] = {}

        def spec_of(spec_id: int) -> Any:
            if spec_id not in bound:
                bound[spec_id] = _BoundSpec(specs[spec_id], schema)
            return bound[spec_id]

        for data_file in self._added_data_files:  # type: ignore[attr-defined]
            collector.add_file(data_file=data_file, partition_spec=spec_of(metadata.default_spec_id), schema=schema)
        for data_file in self._deleted_data_files:  # type: ignore[attr-defined]
            collector.remove_file(data_file=data_file, partition_spec=spec_of(data_file.spec_id), schema=schema)
        parent = self._parent_snapshot_id  # type: ignore[attr-defined]
        previous = metadata.snapshot_by_id(parent) if parent is not None else None
        return update_snapshot_summaries(summary=Summary(operation=self._operation,  # type: ignore[attr-defined]
                                                         **collector.build(), **snapshot_properties),
                                         previous_summary=previous.summary if previous is not None else None)


class _CompactingOverwrite(_BoundSummary, _OverwriteFiles):
    """An overwrite whose snapshot lists ONE manifest per partition spec.

    pyiceberg's overwrite writes added, deleted and kept entries to separate manifests and keeps
    every untouched manifest, so a table rewritten partition by partition gains about a manifest
    per publish. Here the parent's live entries are read once and written with the new files to
    a single manifest (statuses EXISTING, DELETED and ADDED side by side, as the spec allows):
    one manifest to write per publish and one for every reader to open, whatever the history.
    """

    def _manifests(self) -> list[ManifestFile]:
        by_spec: dict[int, list[ManifestEntry]] = {}
        found: set[str] = set()
        snapshot = self._transaction.table_metadata.snapshot_by_name(name=self._target_branch)
        for manifest in snapshot.manifests(io=self._io) if snapshot is not None else []:
            if manifest.content != ManifestContent.DATA:  # lakepub never writes delete files
                raise LakepubError(f"the published table has delete files ({manifest.manifest_path}) written by "
                                   "another engine; lakepub rewrites partitions and cannot carry them over")
            for entry in _live_entries(manifest, self._io):
                deleted = entry.data_file in self._deleted_data_files
                if deleted:
                    found.add(entry.data_file.file_path)
                by_spec.setdefault(manifest.partition_spec_id, []).append(ManifestEntry.from_args(
                    status=ManifestEntryStatus.DELETED if deleted else ManifestEntryStatus.EXISTING,
                    snapshot_id=self._snapshot_id if deleted else entry.snapshot_id,
                    sequence_number=entry.sequence_number,
                    file_sequence_number=entry.file_sequence_number,
                    data_file=entry.data_file,
                ))
        missing = [f.file_path for f in self._deleted_data_files if f.file_path not in found]
        if missing:  # the same guard as pyiceberg's: summary totals would be wrong otherwise
            raise ValueError(f"cannot delete files that are not in the parent snapshot: {missing[:3]}")
        spec_id = self._transaction.table_metadata.default_spec_id
        for data_file in self._added_data_files:
            by_spec.setdefault(spec_id, []).append(ManifestEntry.from_args(
                status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id,
                sequence_number=None, file_sequence_number=None, data_file=data_file,
            ))
        out = []
        sequence_number = self._transaction.table_metadata.next_sequence_number()  # the new snapshot's
        for spec, entries in sorted(by_spec.items()):
            with self.new_manifest_writer(self.spec(spec)) as writer:
                add_in_one_block(writer, entries)
            manifest = writer.to_manifest_file()
            _remember(manifest.manifest_path, [_as_read_back(e, sequence_number) for e in entries
                                               if e.status != ManifestEntryStatus.DELETED])
            out.append(manifest)
        return out


class _OneBlockFastAppend(_BoundSummary, _FastAppendFiles):
    """pyiceberg's fast append (a new manifest of the added files, every existing manifest kept
    as is), its manifest encoded as one Avro block (``add_in_one_block``) and its entries
    remembered for the next commit's ``_live_entries``: pyiceberg writes a block per entry, ~16 ms
    for the 365 files of a derived daily rollup's full build. Its summary: ``_BoundSummary``."""

    def _manifests(self) -> list[ManifestFile]:
        existing = self._existing_manifests()
        if not self._added_data_files:
            return self._process_manifests(existing)
        entries = [ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id,
                                           sequence_number=None, file_sequence_number=None, data_file=data_file)
                   for data_file in self._added_data_files]
        with self.new_manifest_writer(spec=self._transaction.table_metadata.spec()) as writer:
            add_in_one_block(writer, entries)
        manifest = writer.to_manifest_file()
        sequence_number = self._transaction.table_metadata.next_sequence_number()  # the new snapshot's
        _remember(manifest.manifest_path, [_as_read_back(e, sequence_number) for e in entries])
        return self._process_manifests([manifest] + existing)  # pyiceberg's order: added, then existing

class _BoundSpec:
    """A partition spec's ``partition_to_path`` with its partition type bound to one schema."""

    partition_to_path = PartitionSpec.partition_to_path

    def __init__(self, spec: PartitionSpec, schema) -> None:
        self.fields = spec.fields
        self._type = spec.partition_type(schema)

    def partition_type(self, schema) -> Any:
        return self._type


def fast_append(tx: Transaction, data_files: list[DataFile], snapshot_properties: dict[str, str]) -> None:
    """Stage in ``tx`` one append snapshot of ``data_files``: a new manifest of just these (one
    Avro block, ``_OneBlockFastAppend``), every existing manifest kept as is."""
    with _OneBlockFastAppend(operation=Operation.APPEND, transaction=tx, io=tx._table.io,  # noqa: SLF001
                             branch=MAIN_BRANCH, snapshot_properties=snapshot_properties) as append:
        for data_file in data_files:
            append.append_data_file(data_file)


def add_in_one_block(writer: ManifestWriter, entries: list[ManifestEntry]) -> None:
    """``writer.add_entry`` for each of ``entries`` (its counts, partition summaries and checks),
    with the entries encoded as ONE Avro block instead of one block each.

    pyiceberg's ``ManifestWriter.add_entry`` writes every entry as its own block (a count, a
    deflate stream, a sync marker): for the ~70 entries of a publish spread over 36 partitions
    that was 70 deflate calls and ~40% of the manifest's encoding time. A block of many objects is
    what other Iceberg writers produce; ``tests/test_write_path.py`` reads such a manifest back
    through pyiceberg and compares it with pyiceberg's own. ``writer`` is an open writer (its
    private ``_writer`` is the Avro file; pinned with pyiceberg's version).
    """
    avro = writer._writer  # noqa: SLF001 - see the docstring
    pending: list[ManifestEntry] = []
    avro.write_block = pending.extend  # an instance attribute: shadows the method while adding
    try:
        for entry in entries:
            writer.add_entry(entry)
    finally:
        del avro.write_block
    if pending:
        avro.write_block(pending)


# Live entries of the manifests this process wrote last, as a reader of the committed manifest
# would get them (``fetch_manifest_entry(discard_deleted=True)``): the next publish, whose parent
# snapshot lists that manifest, starts from them instead of decoding it again (~5 ms of Python
# Avro per publish). Manifests are immutable, so an entry keyed by its path never goes stale; one
# written by a commit that failed is never asked for. tests/test_readers.py compares both.
_WRITTEN: dict[str, list[ManifestEntry]] = {}
_WRITTEN_MAX = 8


def _remember(path: str, entries: list[ManifestEntry]) -> None:
    _WRITTEN[path] = entries
    while len(_WRITTEN) > _WRITTEN_MAX:
        del _WRITTEN[next(iter(_WRITTEN))]


def _live_entries(manifest: ManifestFile, io: FileIO) -> list[ManifestEntry]:
    found = _WRITTEN.get(manifest.manifest_path)
    return found if found is not None else manifest.fetch_manifest_entry(io=io, discard_deleted=True)


def _as_read_back(entry: ManifestEntry, sequence_number: int) -> ManifestEntry:
    """An entry as read from the committed manifest: added entries inherit the snapshot's
    sequence numbers (the manifest list assigns them)."""
    if entry.status != ManifestEntryStatus.ADDED:
        return entry
    return ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=entry.snapshot_id,
                                   sequence_number=sequence_number, file_sequence_number=sequence_number,
                                   data_file=entry.data_file)
