"""Offline rebuild of a base dataset whose definition changed: from its ledger, then one swap.

A base dataset's published definition (projection, partition) is recorded on its table, and
``lakepub run`` refuses a YAML that changed it (``DefinitionChanged``, exit 2). ``lakepub rebuild
DATASET`` builds the new definition beside it instead:

1. the live state of every entity at the ledger snapshot the dataset's newest publish records
   (``publish/states.live_states``, what ``verify --deep`` and a newly added dataset use) is
   projected by the new definition (``Kind.build``) into an isolated table,
   ``<dataset>__rebuild_<12 hex of its new data version>`` created with the new schema,
   partition spec and recorded definition, in one commit whose record carries the same
   positions, ledger snapshot and totals as that publish and the new data version;
2. audit: every partition's checksum is recomputed from the rows read back and compared with the
   recorded one;
3. ONE catalog transaction (``store/commit.swap_table``) points the dataset's table at the
   rebuilt metadata, asserting that neither the published table nor the entity's ledger moved
   since step 1 (a publish meanwhile: exit 4, retry), and drops the rebuild's entry.

Readers see the old definition until the swap and the new one after it; from then on ``lakepub
run`` maintains it with its siblings (its recorded definition is the new one). A rebuild that
crashed leaves its table: the next run drops and rebuilds it (one commit, nothing to resume);
one whose definition changed again (or was reverted) since is *abandoned* (``lakepub plan``
lists it) and any ``lakepub rebuild`` of the dataset drops it, even one with nothing to rebuild.
SQL catalogs only. Cost: one DuckDB scan of the ledger, the projection, one write of the table.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from lakepub.errors import BlockedError, CommitContention, UserError, VerifyFailed


@dataclass(frozen=True)
class BaseRebuild:
    dataset: str
    data_version: str
    previous_version: str | None
    partitions: int
    rows: int
    metadata_location: str

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def rebuild_base(ws, name: str, on_drop: Callable[[str, list[str]], None] | None = None) -> BaseRebuild | None:
    """Rebuild base dataset ``name`` under its current definition; None if it is already at it.
    ``on_drop(name, tables)``: the abandoned rebuild tables it dropped (of neither version)."""
    from pyiceberg.exceptions import NoSuchTableError

    from lakepub import duck
    from lakepub.derive.rebuild import rebuild_name
    from lakepub.identity import RECORDED_CHECKSUM_HEX, fingerprint
    from lakepub.ops.data_version import of_dataset, of_spec
    from lakepub.projection.checksum import partition_checksum
    from lakepub.publish.datasets import DatasetWriter
    from lakepub.publish.published_state import split
    from lakepub.publish.states import live_states
    from lakepub.store.commit import CommitConflict, TableChange, commit_atomically, commit_mode, swap_table
    from lakepub.store.layout import ledger_id, summary_id
    from lakepub.store.published import ensure_published
    from lakepub.store.record import Counts, PublishRecord, latest_published

    spec = ws.config.datasets.get(name)
    if spec is None:
        ws.config.dataset(name)  # unknown or derived: exit 2
    catalog, ns = ws.catalog, ws.config.namespace
    if commit_mode(catalog, ws.config.commit) != "atomic":
        raise BlockedError("an offline rebuild swaps tables in one catalog transaction, which needs a SQL catalog "
                           "(SQLite or PostgreSQL)")
    try:
        published = catalog.load_table(summary_id(ns, name))
    except NoSuchTableError:
        raise UserError(f"dataset '{name}' has no published table yet: 'lakepub run {name}' publishes it "
                        "under its definition") from None
    from lakepub.lifecycle.retirement import check_not_retired

    # The swap replaces the table's metadata, its retirement record with it: a retired dataset
    # would come back in views and listings. Refused like 'run' (exit 3): restore it first.
    check_not_retired(published, name, "rebuilding it")
    found = latest_published(published)
    if found is None:
        raise UserError(f"dataset '{name}' has no lakepub publish yet: 'lakepub run {name}' publishes it")
    record = found[1]
    from lakepub.publish.dual import check_major

    check_major(name, record.contract, spec.contract, "rebuilt")  # stale dataset files after a DUAL_WRITE swap
    desired, current = of_spec(spec), of_dataset(published, spec, record)
    _drop_abandoned(catalog, ns, name, (desired, current), on_drop)
    if desired == current:
        return None
    ledger = catalog.load_table(ledger_id(ns, spec.entity))
    into = rebuild_name(name, desired)
    try:  # a crashed rebuild's table: built again from scratch (one commit, nothing to resume)
        catalog.drop_table(summary_id(ns, into))
    except NoSuchTableError:
        pass
    target = ensure_published(catalog, ns, dataclasses.replace(spec, name=into))
    writer = DatasetWriter(spec)
    con = duck.connect(ws.config.catalog)
    try:
        states = live_states(con, ledger, record.ledger_snapshot, spec.contract)
    finally:
        con.close()
    rewrite = writer.rebuild(target, states)
    built = PublishRecord(
        batch_id=fingerprint("lakepub-rebuild-v1", name, desired, str(record.ledger_snapshot), record.batch_id),
        batch={"kind": "rebuild", "source": "(rebuild)", "from": current or ""},
        positions=record.positions, contract=spec.contract.schema_ref, contract_sha256=spec.contract.sha256,
        schema_id=target.metadata.current_schema_id, checksums=rewrite.checksums,
        counts=Counts(partitions_rewritten=len(rewrite.partitions)), totals=record.totals,
        ledger_snapshot=record.ledger_snapshot, partition_count=writer.partition_count(target, rewrite),
        data_version=desired,
    )
    from lakepub.derive.rebuild import carried_properties
    from lakepub.store.write import transaction

    tx = transaction(target)  # the published table's user properties survive the swap (rebuild.py)
    carry = carried_properties(published.properties, target.properties)
    if carry:
        tx.set_properties(carry)
    tx, _ = writer.stage(target, rewrite, built, tx=tx)
    commit_atomically(catalog, [TableChange(target, tx)])
    target = catalog.load_table(summary_id(ns, into))
    schema = spec.kind.output_schema()  # audit: the rows read back give the recorded checksums
    rows = target.scan().to_arrow().select(schema.names).cast(schema)
    for value, part in split(rows, spec.partition).items():
        label = spec.partition.label(value)
        if partition_checksum(part)[:RECORDED_CHECKSUM_HEX] != rewrite.checksums.get(label):
            raise VerifyFailed(f"rebuild audit of {name}: partition {label} of {into} does not read back as "
                               "written; the published table was not touched")
    try:
        location = swap_table(catalog, summary_id(ns, name), published.metadata_location, summary_id(ns, into),
                              unchanged=((ledger_id(ns, spec.entity), ledger.metadata_location),),
                              rebuilt_location=target.metadata_location)  # the table audited, no other
    except CommitConflict as exc:
        # Not resumable (the next rebuild starts over), unless another rebuild re-created it since:
        # a table left behind would sit in the folder the published table lives in once another
        # rebuild of that version is swapped in.
        from lakepub.derive.rebuild import drop_if_unmoved

        drop_if_unmoved(catalog, summary_id(ns, into), target.metadata_location)
        raise CommitContention(f"{name} or its entity's ledger moved while it was rebuilt ({exc}); nothing was "
                               f"swapped: run 'lakepub rebuild {name}' again") from exc
    return BaseRebuild(name, desired, current, len(rewrite.partitions), rows.num_rows, location)


def _drop_abandoned(catalog, ns: str, name: str, versions, on_drop) -> None:
    """Drop rebuild tables of ``name`` built for none of ``versions`` (the definition changed again,
    or was reverted, after a rebuild crashed); the janitor then sweeps their folders."""
    from pyiceberg.exceptions import NoSuchTableError

    from lakepub.derive.rebuild import drop_if_unmoved, list_rebuilds, rebuild_name
    from lakepub.store.layout import summary_id

    keep = {rebuild_name(name, v) for v in versions if v}
    dropped = []
    for table in list_rebuilds(catalog, ns).get(name, []):
        if table in keep:
            continue
        try:
            location = catalog.load_table(summary_id(ns, table)).metadata_location
        except NoSuchTableError:
            continue
        if drop_if_unmoved(catalog, summary_id(ns, table), location):
            dropped.append(table)
    if dropped and on_drop:
        on_drop(name, dropped)
