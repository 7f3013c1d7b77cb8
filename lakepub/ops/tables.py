"""``lakepub tables``: every published table, as an outside reader needs to find it.

Per dataset with a published snapshot: its table (``<namespace>.<dataset>``), and per entity of
those datasets its ledger (``<namespace>.<entity>__ledger``), each with the Iceberg identifier, the
catalog's current metadata location, the snapshot id and, for a dataset, its data version
(``data_version.py``). The metadata location is the catalog's pointer, never a guess from file
names: a publish killed before its pointer swap leaves a newer metadata file holding data that was
never published. ``iceberg_scan('<metadata location>')`` (DuckDB), ``StaticTable`` (pyiceberg) and
``polars.scan_iceberg`` read exactly the listed snapshot of a dataset's table.

A ledger's ``snapshot_id`` is the one its datasets' newest publish records. Under the atomic
commit that is the ledger's current snapshot; under the ordered commit the ledger's ``main`` may
hold one more append that no publish names yet (``current_snapshot_id`` then differs): read the
ledger with ``snapshot_from_id`` to see only published rows.

Cost: one catalog load per table (no data or manifest is read).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from pyiceberg.exceptions import NoSuchTableError

from lakepub.lifecycle.retirement import retirement_of
from lakepub.ops.data_version import of_dataset
from lakepub.store.layout import ledger_id, summary_id
from lakepub.store.record import latest_record


@dataclass(frozen=True)
class PublishedTable:
    kind: str  # "dataset" | "derived" | "ledger"
    name: str  # the dataset, or the entity for a ledger
    identifier: str  # namespace.table, as the catalog names it
    metadata_location: str
    snapshot_id: int | None  # published snapshot (a ledger: the one its datasets record)
    current_snapshot_id: int | None  # the table's main head (equal to snapshot_id but for a ledger ahead of it)
    data_version: str | None = None  # datasets only
    datasets: list[str] = field(default_factory=list)  # a ledger's published datasets

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def published_tables(ws) -> list[PublishedTable]:
    """Published datasets in name order, then derived datasets, then the ledgers of the entities."""
    catalog, ns = ws.catalog, ws.config.namespace
    out: list[PublishedTable] = []
    ledgers: dict[str, tuple[list[int], list[str]]] = {}
    for name in sorted(ws.config.datasets):
        spec = ws.config.datasets[name]
        try:
            table = catalog.load_table(summary_id(ns, name))
        except NoSuchTableError:
            continue
        current = table.metadata.current_snapshot_id
        if current is None or retirement_of(table) is not None:  # retired: hidden (lifecycle/retirement.py)
            continue
        record = latest_record(table)
        out.append(PublishedTable("dataset", name, _ident(summary_id(ns, name)), table.metadata_location, current,
                                  current, of_dataset(table, spec, record)))
        recorded, members = ledgers.setdefault(spec.entity, ([], []))
        members.append(name)
        if record is not None and record.ledger_snapshot is not None:
            recorded.append(record.ledger_snapshot)
    for name in sorted(ws.config.derived):  # derived datasets (lakepub reconcile): no ledger
        try:
            table = catalog.load_table(summary_id(ns, name))
        except NoSuchTableError:
            continue
        current = table.metadata.current_snapshot_id
        if current is not None:
            out.append(PublishedTable("derived", name, _ident(summary_id(ns, name)), table.metadata_location, current,
                                      current, of_dataset(table, ws.config.derived[name], latest_record(table))))
    for entity in sorted(ledgers):
        recorded, members = ledgers[entity]
        ident = ledger_id(ns, entity)
        try:
            ledger = catalog.load_table(ident)
        except NoSuchTableError:
            continue
        head = ledger.metadata.current_snapshot_id
        # The newest ledger snapshot a member records (a member left behind records an older one).
        kept = [s for s in map(ledger.snapshot_by_id, recorded) if s is not None]
        published = max(kept, key=lambda s: s.sequence_number).snapshot_id if kept else head
        out.append(PublishedTable("ledger", entity, _ident(ident), ledger.metadata_location, published, head,
                                  None, members))
    return out


def _ident(identifier: tuple[str, ...]) -> str:
    return ".".join(identifier)
