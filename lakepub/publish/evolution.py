"""Schema evolution applied with the data: a compatible new contract version changes the Iceberg
schemas of the entity's ledger and published tables in the same atomic commit as its first batch.

A dataset YAML that points at a new contract version (``contracts/orders@v1.1``) changes nothing
by itself. The first publish under it compares the contract with what the tables were written for:

* **the contract** (``check_contract``): the ledger records the shape of the contract it was
  written for (``lakepub.contract-shape``: roles and field types) and, once evolved, its
  reference (``lakepub.contract-ref``; before, the published records name it). A shape that
  differs under the *same* version is a file edited in place: ``DefinitionChanged`` (exit 2,
  naming the file and the key; a change is a new version). Under a new version, the published one is loaded from the same contracts folder and the change is
  judged by ``contract/compat.py`` in the new contract's ``compat_mode``: a breaking finding
  (required field without default, narrowing, scale change, removal, key or partition change,
  any change of the entity's roles) or a structural/policy error is refused with
  ``IncompatibleContract`` (exit 3: the contract file is valid, the published tables cannot take
  it; publish it as a new major version through DUAL_WRITE: ``publish/dual.py``). Without the
  old file, only added nullable-or-defaulted fields and Iceberg promotions pass (with it too, whatever
  the compat_mode: the old rows stay and are read with the new schema, the backward direction);
* **each table** (``plan``): the columns lakepub would write for the new contract (``expected``)
  against the table's current schema. A column the table never had (in *any* of its schemas:
  Iceberg never reuses a name's id, so a column dropped by another tool is told apart from a new
  one) is added as optional; a column whose type Iceberg promotes (int->long, float->double,
  decimal precision at equal scale) is promoted, nested fields of the compacted ledger's
  ``history`` included. Anything else is a problem the guards report as a foreign change.

``stage`` puts the schema update (and the new ``lakepub.contract-shape``/``-ref`` or
``lakepub.definition`` properties) first into the table's transaction; the publish then writes
its data files with the evolved schema (``evolved``) and stages its snapshot on top, so the
snapshot carries the new schema id and the commit asserts the schema it was planned on
(``AssertCurrentSchemaId``). A crash before the pointer swap leaves the old schemas and data.

A published table whose schema evolves gets **every** partition rewritten by that publish
(``widen``): a partition checksum renders every column, and a float promoted to double renders
differently, so untouched partitions would no longer match their recorded checksums. One full
rewrite of the published table per evolution; the ledger (append-only) keeps its old files,
read with nulls for the new column by Iceberg's field-id resolution (DuckDB, pyiceberg).
Measured (``scripts/bench/evolution.py``, 100k live customers, loaded 2-core machine, minimums):
a 20-event batch touching ~17 of 64 buckets publishes in 0.31 s, the evolving one (64 rewritten)
in 0.47 s; a batch touching every partition anyway costs the same evolving or not (0.44/0.48 s).
Without a pending evolution a publish pays one JSON comparison of the contract's shape per
publisher, and (a contract other than the built-in orders one, on a ledger never evolved) one
look-up of the published version (``recorded_ref``: ~2-3 ms, a catalog load, once per publisher:
an unchanged shape under a new version is still judged by ``compat``), and ``plans`` (~0.9-1.3 ms for orders_daily) once per contract and schema of the
tables (``begin`` remembers those that need nothing: ~5-20 us after; the guards' ``plan`` runs
once per metadata version, like their other schema checks).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction
from pyiceberg.types import (
    DecimalType, DoubleType, FloatType, IcebergType, IntegerType, ListType, LongType, NestedField, PrimitiveType,
    StructType,
)

from lakepub.config import EntityGroup
from lakepub.contract.model import Contract
from lakepub.errors import BlockedError, ConfigError, DefinitionChanged, IncompatibleContract

if TYPE_CHECKING:
    from lakepub.publish.datasets import DatasetWriter, Rewrite

CONTRACT_REF_PROPERTY = "lakepub.contract-ref"  # the contract version the ledger was last evolved to
_SETTLED: set[tuple] = set()  # (contract sha256, (table uuid, schema id)...) that need no evolution


# --- the contract ------------------------------------------------------------------------------


def recorded_ref(catalog: Catalog, namespace: str, group: EntityGroup, ledger: Table) -> str | None:
    """The contract version the entity's tables were written for: the ledger's
    ``lakepub.contract-ref`` (set by an evolution), else the newest record of a published batch.
    Build and compaction records are passed over: they name the contract of the process that
    wrote them, which for a dataset built under a new version before the batch that evolves the
    ledger is that new version, not the one the ledger holds (taken for it, the next publish was
    refused as that version edited in place)."""
    ref = ledger.metadata.properties.get(CONTRACT_REF_PROPERTY)
    if ref:
        return ref
    from lakepub.store.record import published_history

    found: list[tuple[int, str]] = []  # (timestamp, contract) of each dataset's newest batch record
    for name in group.dataset_names:
        if catalog.table_exists((namespace, name)):
            for snapshot, record in published_history(catalog.load_table((namespace, name))):
                if record.batch.get("kind") in ("build", "compaction"):
                    continue
                if record.contract:
                    found.append((snapshot.timestamp_ms, record.contract))
                break
    return max(found)[1] if found else None


def check_contract(contract: Contract, recorded: dict[str, Any], current: dict[str, Any],
                   ref: str | Callable[[], str | None] | None) -> bool:
    """Refuse (``IncompatibleContract``) unless ``contract`` (shape ``current``) is a compatible
    evolution of the contract the ledger was written for (shape ``recorded``, version ``ref``);
    True when the schemas have to evolve (the shapes differ).

    Equal shapes (field types and roles) need no schema change, but a new version with them can
    still be breaking (a nullable field made required, an enum narrowed): it is judged like any
    other version, so ``ref`` is looked up whenever the version may differ."""
    where = str(contract.path or contract.schema_ref)
    if recorded == current:
        ref = ref() if callable(ref) else ref
        if ref and ref != contract.schema_ref:
            _check_compat(contract, where, ref, _load_old(contract, ref))
        return False
    ref = ref() if callable(ref) else ref
    if ref == contract.schema_ref:
        _edited_in_place(contract, where, recorded, current)
    published = ref or "the published contract"
    for role in ("key", "version", "deleted"):
        if recorded.get(role) != current.get(role):
            raise _refuse(contract, where, published, f"entity.{role}",
                          f"the entity's {role} changes from {recorded.get(role)} to {current.get(role)}")
    old = _load_old(contract, ref)
    _check_compat(contract, where, published, old)
    old_fields, new_fields = recorded.get("fields", {}), current.get("fields", {})
    for name, type_name in old_fields.items():  # the structural floor, with or without the old file
        if name not in new_fields:
            raise _refuse(contract, where, published, f"fields.{name}", f"'{name}' is removed")
        if new_fields[name] != type_name and not promotes(_iceberg(type_name), _iceberg(new_fields[name])):
            raise _refuse(contract, where, published, f"fields.{name}.type",
                          f"'{name}' changes from {type_name} to {new_fields[name]}, not an Iceberg promotion")
    # Whatever direction compat_mode checks (``forward`` only asks old readers to read new data),
    # the published tables keep the old rows and are read with the new schema: a field they lack
    # must read as null or its default, so a required one without a default is refused here too.
    for name in new_fields:
        f = contract.field(name)
        if name not in old_fields and not f.nullable and f.default is None:
            raise _refuse(contract, where, published, f"fields.{name}",
                          f"'{name}' is added as required without a default: rows written before cannot have it")
    return True


def _check_compat(contract: Contract, where: str, published: str, old: Contract | None) -> None:
    """Refuse ``contract`` if ``contract/compat.py`` finds it breaking (or a structural or policy
    error) against ``old``, the published version's file (nothing to judge without it), in its
    ``compat_mode`` and in the backward direction in any mode: the tables keep the old rows."""
    if old is None:
        return
    from lakepub.contract import compat

    result = compat.check([old], contract)
    findings = result.findings + compat.reads_old_data(old, contract)  # backward, whatever compat_mode
    bad = [f for f in findings if f.breaking or (f.level == "error" and f.kind in ("structural", "policy"))]
    if bad:
        f = bad[0]
        raise _refuse(contract, where, published, f"fields.{f.field}" if f.field else "entity",
                      f"{f.rule}: {f.message}" + (f" ({f.failure_mode})" if f.failure_mode else ""))


def _edited_in_place(contract: Contract, where: str, recorded: dict[str, Any], current: dict[str, Any]) -> None:
    """The published version's file was edited (same version, another shape): a configuration
    error (exit 2) naming the file and the first key that differs; a change is a new version."""
    advice = ("nothing was published; a published contract version cannot change its roles or fields: declare "
              "the change as a new version (a compatible one evolves the tables with its first data), or set it back")
    for role in ("key", "version", "deleted"):
        if recorded.get(role) != current.get(role):
            raise DefinitionChanged(where, f"entity.{role}", recorded.get(role), current.get(role), advice)
    old, new = recorded.get("fields", {}), current.get("fields", {})
    for name in list(old) + [n for n in new if n not in old]:
        if old.get(name) != new.get(name):
            key = f"fields.{name}" + (".type" if name in old and name in new else "")
            raise DefinitionChanged(where, key, old.get(name, "(absent)"), new.get(name, "(absent)"), advice)


def _refuse(contract: Contract, where: str, published: str, key: str, why: str) -> IncompatibleContract:
    return IncompatibleContract(
        f"{where}: contract {contract.schema_ref} is not a compatible evolution of {published}, which the "
        f"published tables were written for ('{key}': {why}); nothing was published: a breaking change is "
        "published as a new major version into a new dataset built beside the old one: keep the dataset on "
        f"{published} and take the new major version through 'lakepub contract promote ... --to DUAL_WRITE' "
        "(both published in one commit, swapped in at DEFAULT), or set the dataset back to the published contract",
        file=where, key=key)


def _load_old(contract: Contract, ref: str | None) -> Contract | None:
    """The published contract version from the new one's folder (``<name>@v<version>.yaml``)."""
    if not ref or contract.path is None or not ref.startswith("contracts/"):
        return None
    path = Path(contract.path).parent / f"{ref[len('contracts/'):]}.yaml"
    if not path.is_file():
        return None
    from lakepub.contract.model import load_contract

    try:
        return load_contract(path)
    except ConfigError:
        return None


def _iceberg(type_name: str) -> IcebergType:
    from lakepub.contract.types import FieldType

    return FieldType.parse(type_name).iceberg


def promotes(old: IcebergType, new: IcebergType) -> bool:
    """Iceberg's type promotions (a reader of ``new`` reads ``old`` data)."""
    if old == new:
        return True
    if isinstance(old, IntegerType) and isinstance(new, LongType):
        return True
    if isinstance(old, FloatType) and isinstance(new, DoubleType):
        return True
    return (isinstance(old, DecimalType) and isinstance(new, DecimalType) and old.scale == new.scale
            and new.precision >= old.precision)


# --- one table ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """How a table's schema moves to the columns lakepub writes for the current contract."""

    table: str
    added: tuple[tuple[tuple[str, ...], IcebergType], ...] = ()  # (path, type): new optional columns
    promoted: tuple[tuple[tuple[str, ...], PrimitiveType], ...] = ()  # (path, new type)
    problems: tuple[str, ...] = ()  # differences that are no evolution (another tool's change)
    properties: dict[str, str] = field(default_factory=dict)  # table properties set with it

    @property
    def evolves(self) -> bool:
        return bool(self.added or self.promoted)

    @property
    def empty(self) -> bool:
        return not (self.added or self.promoted or self.properties)

    def describe(self) -> str:
        return ", ".join([f"add {'.'.join(p)} {t}" for p, t in self.added]
                         + [f"promote {'.'.join(p)} to {t}" for p, t in self.promoted])


def plan(table: Table, expected: Schema, properties: Mapping[str, str] | None = None) -> Plan:
    """The schema update taking ``table`` to ``expected`` (compared by name; ids are the table's)."""
    added: list = []
    promoted: list = []
    problems: list[str] = []
    schemas = list(table.metadata.schemas)
    _diff((), table.schema().as_struct(), expected.as_struct(), schemas, added, promoted, problems)
    props = {k: v for k, v in (properties or {}).items() if table.metadata.properties.get(k) != v}
    return Plan(".".join(table.name()), tuple(added), tuple(promoted), tuple(problems), props)


def _diff(path: tuple[str, ...], actual: IcebergType, expected: IcebergType, schemas: list[Schema],
          added: list, promoted: list, problems: list[str]) -> None:
    name = ".".join(path) or "(table)"
    if isinstance(expected, StructType) and isinstance(actual, StructType):
        have = {f.name: f for f in actual.fields}
        want = {f.name for f in expected.fields}
        for f in expected.fields:
            sub = (*path, f.name)
            if f.name in have:
                _diff(sub, have[f.name].field_type, f.field_type, schemas, added, promoted, problems)
            elif any(_had(s, sub) for s in schemas):
                problems.append(f"missing column {'.'.join(sub)} ({f.field_type}), dropped after it was written")
            else:
                added.append((sub, _fresh(f.field_type)))
        problems += [f"extra column {'.'.join((*path, n))} ({have[n].field_type})" for n in have if n not in want]
    elif isinstance(expected, ListType) and isinstance(actual, ListType):
        _diff((*path, "element"), actual.element_type, expected.element_type, schemas, added, promoted, problems)
    elif isinstance(expected, PrimitiveType) and isinstance(actual, PrimitiveType):
        if actual != expected:
            if promotes(actual, expected):
                promoted.append((path, expected))
            else:
                problems.append(f"changed column {name} ({expected} -> {actual})")
    else:
        problems.append(f"changed column {name} ({expected} -> {actual})")


def _had(schema: Schema, path: tuple[str, ...]) -> bool:
    try:
        schema.find_field(".".join(path))
        return True
    except ValueError:
        return False


def _fresh(t: IcebergType) -> IcebergType:
    """``t`` with every nested field optional (ids are reassigned by the schema update)."""
    if isinstance(t, StructType):
        return StructType(*(NestedField(f.field_id, f.name, _fresh(f.field_type), required=False) for f in t.fields))
    if isinstance(t, ListType):
        return ListType(element_id=t.element_id, element=_fresh(t.element_type), element_required=False)
    return t


def stage(tx: Transaction, p: Plan) -> None:
    """Stage ``p``'s schema update and properties first in ``tx`` (before its snapshot)."""
    if p.evolves:
        with tx.update_schema() as update:
            for path, t in p.added:
                update.add_column(path if len(path) > 1 else path[0], t, required=False)
            for path, t in p.promoted:
                update.update_column(path if len(path) > 1 else path[0], field_type=t)
    if p.properties:
        tx.set_properties(p.properties)


def evolved(table: Table, tx: Transaction) -> Table:
    """``table`` as its data files must be written inside ``tx``: with the staged schema."""
    if tx.table_metadata.current_schema_id == table.metadata.current_schema_id:
        return table
    return Table(table.name(), tx.table_metadata, table.metadata_location, table.io, table.catalog)


# --- the published table -----------------------------------------------------------------------


def definition_evolves(recorded: Mapping[str, Any], current: Mapping[str, Any], table: Table, ledger: Table) -> bool:
    """A recorded definition differing from the current one only by columns appended to a
    current-state table (its default column list follows the contract, or a new field was
    listed) that are **new fields**: absent from the ledger snapshot the table was last published
    from, so every row it holds has them null. Such a definition evolves with the data; a field
    the ledger already had (its values are not null) needs a rebuild and stays refused."""
    keys = set(recorded) | set(current)
    if any(recorded.get(k) != current.get(k) for k in keys - {"columns"}):
        return False
    old, new = recorded.get("columns"), current.get("columns")
    if not isinstance(old, list) or not isinstance(new, list) or old == new:
        return False
    if [c for c in new if c in old] != old:  # none removed, no reordering
        return False
    from lakepub.store.layout import columns_at
    from lakepub.store.record import latest_record

    record = latest_record(table)
    if record is not None:
        had = columns_at(ledger, record.ledger_snapshot) if record.ledger_snapshot is not None else set()
        if had is None or any(c in had for c in new if c not in old):
            return False
    return not any(_had(s, (c,)) for s in table.metadata.schemas for c in new if c not in old)


def float_widened(ledger: Table, contract: Contract) -> frozenset[str]:
    """The contract's double state fields that some schema of the ledger (the current one
    included: an evolution still to come) has as float: their ledger values may be floats, which
    a resent event's double must be compared with as a float (``versioning._same_state``). One
    pass over the ledger's few schemas."""
    doubles = [n for n in contract.state_names if isinstance(contract.field(n).type.iceberg, DoubleType)]
    return frozenset(n for n in doubles for s in ledger.metadata.schemas
                     if n in s.column_names and isinstance(s.find_field(n).field_type, FloatType))


def as_schema(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """Rows read from a snapshot written before an evolution, in the current ``schema``: a column
    it lacks is null (a new field), the others cast (a promotion)."""
    for f in schema:
        if f.name not in rows.column_names:
            rows = rows.append_column(f.name, pa.nulls(rows.num_rows, f.type))
    return rows.select(schema.names).cast(schema)


def widen(writer: DatasetWriter, table: Table, rewrite: Rewrite) -> Rewrite:
    """``rewrite`` extended to every partition of the table (see the module docstring): each
    partition's rows in the new schema (new columns null), rewritten with a new checksum."""
    from lakepub.identity import RECORDED_CHECKSUM_HEX
    from lakepub.projection.checksum import partition_checksum
    from lakepub.publish.datasets import Rewrite

    state = writer.state(table)
    schema, partition = writer.schema, writer.spec.partition
    rows = {v: r for v, r in state.rows.items() if v not in rewrite.values}
    rows.update(rewrite.rows)
    rows = {v: r.select(schema.names).cast(schema) for v, r in rows.items()}
    values = frozenset(rows) | rewrite.values
    checksums = {partition.label(v): partition_checksum(rows[v])[:RECORDED_CHECKSUM_HEX] for v in values}
    return Rewrite(values, rows, checksums, sorted(checksums))


def shape_property(contract: Contract) -> dict[str, str]:
    """The ledger properties recording the contract it is written for, after an evolution."""
    from lakepub.store.layout import CONTRACT_SHAPE_PROPERTY, contract_shape

    return {CONTRACT_SHAPE_PROPERTY: contract_shape(contract), CONTRACT_REF_PROPERTY: contract.schema_ref}




def begin(contract: Contract, writers: Mapping[str, DatasetWriter], ledger: Table, tables: Mapping[str, Table],
          rewrites: dict[str, Rewrite]) -> tuple[Transaction | None, dict[str, Transaction]]:
    """A publish's evolution (``plans``), staged: the ledger's transaction (None if its schema
    stays) and those of the published tables that evolve, whose ``rewrites`` are ``widen``-ed to
    every partition. The publish stages its snapshots in these transactions, after the update."""
    from lakepub.store.write import transaction

    from lakepub.store.published import definition_of

    key = (contract.sha256, *((str(t.metadata.table_uuid), t.metadata.current_schema_id)
                              for t in (ledger, *(tables[n] for n in writers))),
           *(json.dumps(definition_of(w.spec), sort_keys=True) for w in writers.values()))
    if key in _SETTLED:  # a table's schema id names one immutable schema: settled once, settled for good
        return None, {}
    ledger_plan, table_plans = plans(contract, {n: w.spec for n, w in writers.items()}, ledger, tables)
    if ledger_plan.empty and not table_plans:
        if len(_SETTLED) > 256:
            _SETTLED.clear()
        _SETTLED.add(key)
    ledger_tx = transaction(ledger) if not ledger_plan.empty else None
    if ledger_tx is not None:
        stage(ledger_tx, ledger_plan)
    txs = {name: transaction(tables[name]) for name in table_plans}
    for name, tx in txs.items():
        stage(tx, table_plans[name])
        rewrites[name] = widen(writers[name], tables[name], rewrites[name])
    return ledger_tx, txs


def refuse_pending(contract: Contract, writers: Mapping[str, DatasetWriter], ledger: Table,
                   tables: Mapping[str, Table], what: str) -> None:
    """Refuse (exit 3) ``what`` (a maintenance job that rewrites the ledger with the contract's
    columns) while an evolution waits for its first batch: it is applied only with data."""
    ledger_plan, table_plans = plans(contract, {n: w.spec for n, w in writers.items()}, ledger, tables)
    todo = [p for p in (ledger_plan, *table_plans.values()) if p.evolves]
    if todo:
        raise BlockedError(
            f"contract {contract.schema_ref} is not applied to the tables yet ({'; '.join(f'{p.table}: {p.describe()}' for p in todo)}); "
            f"{what} works on the published schema and changed nothing: publish a batch under the new version first "
            "(the evolution is applied with its data), or run it with the datasets on the published contract")


def plans(contract: Contract, specs: Mapping[str, Any], ledger: Table, tables: Mapping[str, Table]
          ) -> tuple[Plan, dict[str, Plan]]:
    """The entity's schema updates for a publish under ``contract``: the ledger's (with its new
    ``lakepub.contract-shape``/``-ref``) and every published table's that changes (with its new
    ``lakepub.definition``). Empty plans when the tables already are what the contract says."""
    from lakepub.store.layout import ledger_iceberg
    from lakepub.store.published import DEFINITION_PROPERTY, definition_of, published_schema

    ledger_plan = plan(ledger, ledger_iceberg(ledger, contract))
    if ledger_plan.evolves:
        ledger_plan = plan(ledger, ledger_iceberg(ledger, contract), shape_property(contract))
    elif ledger.metadata.properties.get(CONTRACT_REF_PROPERTY, contract.schema_ref) != contract.schema_ref:
        # A new version without a schema change (once the ledger names one): the first publish
        # under it records it, or a later in-place edit of it would pass as an evolution from
        # the older version instead of being refused (``_edited_in_place``).
        ledger_plan = plan(ledger, ledger_iceberg(ledger, contract), {CONTRACT_REF_PROPERTY: contract.schema_ref})
    out = {}
    for name, spec in specs.items():
        table = tables[name]
        p = plan(table, published_schema(spec))
        if p.evolves and DEFINITION_PROPERTY in table.metadata.properties:
            p = plan(table, published_schema(spec), {DEFINITION_PROPERTY: json.dumps(definition_of(spec), sort_keys=True)})
        if not p.empty:
            out[name] = p
    return ledger_plan, out
