"""What a projection kind is: a pure function of entity states to published rows.

A dataset publishes a *projection* of the live states of its entities. The versioned core hands a
kind, per batch, the entities whose state changed: ``before`` (their previous live state, one row
per entity live before) and ``after`` (their new live state, one row per entity live after), both
with every contract field; a deleted entity simply has no row on that side. A kind never reads or
writes Iceberg: it turns those into rows, and the publisher moves them.

The invariant every kind keeps, and the property test checks for every partition transform:
starting from nothing, applying ``changes`` batch after batch, partition by partition (each
partition's ``apply`` sees only its own current rows and the change rows whose partition value is
its own), gives exactly ``build(live states)``, row for row, in a deterministic order. So
``build`` is both the backfill of a new dataset and the oracle of ``verify --deep``.

* ``output_schema()``: the published columns, in order.
* ``changes(before, after)``: the signed change rows; every row carries the partition source
  columns, so ``PartitionBy.values(changes)`` names the affected partitions.
* ``apply(current, changes)``: ``current`` holds every published row of the affected partitions
  (rows of other partitions pass through); returns their full new rows, sorted.
* ``build(states)``: the whole published content from the live states of all entities.

A new kind is one new module in this package that subclasses ``Kind`` with ``@register("name")``;
``kind_of`` imports every module of the package once, so nothing else changes.
"""

from __future__ import annotations

import importlib
import pkgutil
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import pyarrow as pa

from lakepub.errors import ConfigError, UserError
from lakepub.projection.partitioning import PartitionBy


@dataclass(frozen=True)
class Entity:
    """The entity a contract declares, as the kinds need it."""

    schema: pa.Schema  # every contract field, in declared order, with its Arrow type
    key: tuple[str, ...]  # never null; composite keys of string/int/long/date
    version: str
    deleted: str | None = None


class OverflowRefused(UserError):
    """A published sum would leave its column's range (int64, or decimal(38)); nothing is published."""

    def __init__(self, dataset: str, partition: str, group: Mapping[str, Any], measure: str, total: object,
                 limit: str):
        self.dataset, self.partition, self.group, self.measure, self.total = dataset, partition, dict(group), measure, total
        where = ", ".join(f"{k}={_show(v)}" for k, v in self.group.items()) or "(all rows)"
        super().__init__(
            f"sum overflow in dataset '{dataset}': measure '{measure}' of group {where} (partition {partition}) "
            f"would be {total}, beyond the {limit} range of the published column; nothing was published. "
            "Check the batch for wrong values (e.g. a unit mix-up) and publish it corrected"
        )


def field_list(value: Any, key: str, schema: pa.Schema, where: str) -> list[str]:
    """A ``projection.<key>`` list of contract fields: a list of names, each declared, none twice."""
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise ConfigError(f"{where}: projection.{key}: expected a list of field names, got {value!r}")
    for col in value:
        if col not in schema.names:
            raise ConfigError(f"{where}: projection.{key}: unknown field '{col}' "
                              f"(contract fields: {', '.join(schema.names)})")
    if len(set(value)) != len(value):
        raise ConfigError(f"{where}: projection.{key}: a field is listed twice: {value}")
    return list(value)


def _show(value: Any) -> str:
    """A group value in a message: dates and timestamps in ISO form, strings quoted."""
    return value.isoformat() if hasattr(value, "isoformat") else repr(value)


class Kind(ABC):
    """One projection kind bound to a dataset definition (see the module docstring)."""

    name: str = ""
    keys: frozenset[str] = frozenset()  # the keys its ``projection:`` mapping accepts besides ``kind``

    def __init__(self, projection: Mapping[str, Any], entity: Entity, partition: PartitionBy, *,
                 where: str, dataset: str = ""):
        self.entity, self.partition, self.where, self.dataset = entity, partition, where, dataset
        unknown = sorted(set(projection) - self.keys - {"kind"})
        if unknown:
            raise ConfigError(f"{where}: projection.{unknown[0]}: unknown key for kind '{self.name}' "
                              f"(accepted: {', '.join(sorted(self.keys | {'kind'}))})")

    @abstractmethod
    def output_schema(self) -> pa.Schema:
        """The published table's columns, in order."""

    @abstractmethod
    def changes(self, before: pa.Table, after: pa.Table) -> pa.Table:
        """The signed change rows of one batch (``before``/``after``: live states, every contract field)."""

    @abstractmethod
    def apply(self, current: pa.Table, changes: pa.Table) -> pa.Table:
        """The new rows of the affected partitions: ``current`` merged with ``changes``, sorted."""

    @abstractmethod
    def build(self, states: pa.Table) -> pa.Table:
        """The whole published content from the live states of all entities, sorted."""

    @property
    @abstractmethod
    def row_key(self) -> tuple[str, ...]:
        """The published columns that identify a row (one row per value; ``lakepub shadow``
        matches the rows of two definitions on them)."""

    @property
    def partition_columns(self) -> tuple[str, ...]:
        """The published columns the partition value is computed from (empty when unpartitioned)."""
        return self.partition.columns

    def empty(self) -> pa.Table:
        """No published rows (what ``current`` is for a partition that does not exist yet)."""
        return self.output_schema().empty_table()

    def partition_label_of(self, row: pa.Table) -> str:
        """The partition label of the first row of ``row`` (for error messages)."""
        return self.partition.label(self.partition.values(row.slice(0, 1))[0])

    def describe(self) -> dict[str, Any]:
        """What the definition means, as plain data (recorded on the published table so that a
        changed definition can be refused); kinds extend it."""
        return {"kind": self.name, "partition": str(self.partition)}


_KINDS: dict[str, type[Kind]] = {}
_LOADED = False


def register(name: str) -> Callable[[type[Kind]], type[Kind]]:
    def decorate(cls: type[Kind]) -> type[Kind]:
        cls.name = name
        _KINDS[name] = cls
        return cls
    return decorate


def kinds() -> dict[str, type[Kind]]:
    """Every registered kind by name (importing each module of this package once)."""
    global _LOADED
    if not _LOADED:
        import lakepub.projection as package
        for info in pkgutil.iter_modules(package.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"{package.__name__}.{info.name}")
        _LOADED = True
    return dict(_KINDS)


# What a dataset without ``projection:`` means (today's orders_daily.yaml): live cents and orders per day.
LEGACY_PROJECTION = {"kind": "aggregate", "group_by": ["day"], "measures": {"cents": "sum(cents)", "orders": "count()"}}
LEGACY_PARTITION = "month"


def kind_of(definition: Mapping[str, Any], entity: Entity, *, where: str, dataset: str = "") -> Kind:
    """The kind a dataset definition declares, checked against its entity.

    ``definition`` is the dataset YAML mapping; its ``projection:`` (absent: the legacy orders
    projection, ``LEGACY_PROJECTION``) and ``partition:`` (absent: ``month`` without a projection,
    as today, ``none`` with one). ``where`` is the file, for errors. Raises ConfigError.
    """
    projection = definition.get("projection")
    legacy = projection is None
    if legacy:
        projection = LEGACY_PROJECTION
    if not isinstance(projection, Mapping):
        raise ConfigError(f"{where}: projection: expected a mapping with a 'kind', got {projection!r}")
    name = projection.get("kind")
    registry = kinds()
    if name not in registry:
        raise ConfigError(f"{where}: projection.kind: expected one of {', '.join(sorted(registry))}, got {name!r}")
    text = definition.get("partition", LEGACY_PARTITION if legacy else "none")
    partition = PartitionBy.parse(text, f"{where}: partition")
    return registry[name](projection, entity, partition, where=where, dataset=dataset)
