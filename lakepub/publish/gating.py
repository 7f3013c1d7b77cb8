"""The publisher's side of the publish gates (``contract/gates.py``): what one batch's verdict
means for its publish, kept out of ``publisher.py`` so that its hooks stay a few lines.

* ``check``: completes the verdict with the unique rules over the published output (a
  current-state dataset of the entity that publishes the unique set and the key: one DuckDB join
  of the batch with its published rows, only for contracts with ``unique``), then refuses the batch
  (``GateRefused``: strict with rejected events, or a broken units promise) or returns the
  ``Outcome`` a lenient publish adds to its commit: the rejected rows, ``rejected`` and
  ``inferred_from_schema_default`` counts and the summary keys;
* ``rejects_change``: the rejects table's part of the publish's atomic commit (none when the
  batch rejected nothing, or when an earlier ordered commit already appended this batch).

The output check reads the published rows as they are when the attempt starts; a commit retry
after a concurrent publish moved any of those tables checks again (``unique_basis``), so two
racing publishers cannot both add one unique value.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from pyiceberg.catalog import Catalog

from lakepub.config import EntityGroup
from lakepub.contract import gates
from lakepub.errors import GateRefused
from lakepub.identity import BatchIdentity
from lakepub.publish.versioning import Shape, prepare_batch
from lakepub.store import rejects
from lakepub.store.commit import TableChange


def partition_columns(group: EntityGroup) -> tuple[str, ...]:
    """What the gate reports name as the partition: ``constraints.partition_by``, else the
    datasets' partition columns that are contract fields."""
    contract = group.contract
    return tuple(contract.constraints.partition_by) or tuple(
        c for c in dict.fromkeys(spec.partition.column for spec in group.datasets) if c in contract.names)


def ensure_tables(catalog: Catalog, namespace: str, group: EntityGroup) -> None:
    """The entity's rejects table, created once a lenient gate may need it."""
    if gates.Gates.of(group.contract) is not None and group.contract.terms.validation.mode == "lenient":
        rejects.ensure_rejects(catalog, namespace, group.name)


def unique_basis(group: EntityGroup, tables: dict[str, Any]) -> tuple[str, ...] | None:
    """The metadata locations of the published tables a unique-over-output check reads (None when
    the contract has no unique rule): a change means the check must run again."""
    gate = gates.Gates.of(group.contract)
    if gate is None or not gate.unique:
        return None
    return tuple(tables[spec.name].metadata_location for spec in group.datasets
                 if spec.kind.name == "current" and spec.name in tables)


def check(catalog: Catalog, namespace: str, group: EntityGroup, con: Callable[[], Any], prepared: Any,
          partitions: tuple[str, ...]) -> tuple[Any, gates.Outcome]:
    """``prepared`` (a ``PreparedBatch``) with its verdict completed, and the lenient outcome."""
    contract = group.contract
    gate = gates.Gates.of(contract)
    verdict = prepared.verdict
    assert gate is not None and verdict is not None
    if gate.unique and not verdict.contract_problem:
        published = []
        for spec in group.datasets:
            if spec.kind.name != "current":
                continue
            table = catalog.load_table((namespace, spec.name))
            if table.current_snapshot() is not None:
                published.append((spec.name, table.metadata_location, tuple(table.schema().column_names)))
        extra = gate.published_clashes(con(), prepared.events, verdict, published) if published else {}
        if extra:
            verdict = gate.apply(prepared.events, extra)
            prepared = replace(prepared, side=prepare_batch(verdict.accepted, Shape.of(contract)), verdict=verdict)
    report = gates.refusal(verdict, prepared.events, partitions, contract.terms.validation.mode,
                           ".".join(rejects.rejects_id(namespace, group.name)))
    if report is not None:
        raise GateRefused(report)
    return prepared, gates.outcome(verdict, prepared.events, partitions)


def rejects_change(catalog: Catalog, namespace: str, entity: str, identity: BatchIdentity,
                   outcome: gates.Outcome | None) -> TableChange | None:
    if outcome is None or not outcome.rows:
        return None
    table = catalog.load_table(rejects.rejects_id(namespace, entity))
    if rejects.holds_batch(table, identity.batch_id):
        return None
    return TableChange(table, rejects.stage(table, identity.batch_id, identity.source, outcome.rows))
