"""The published table of a dataset: created from its projection kind, checked against it.

Per dataset ``D`` in namespace ``N`` the published table ``N.D`` has the kind's output columns
(``Kind.output_schema``: an aggregate's group-by columns and measures, a current-state table's
key and selected columns) and the definition's partition spec. It records what the definition
meant when it was created (table property ``lakepub.definition``: the kind's ``describe()``),
so a definition that changed under published data is refused instead of being mixed in
(``publish/guards.py``). The original ``orders_daily`` table predates the property; its schema
and partition spec are checked instead.
"""

from __future__ import annotations

import json
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform, MonthTransform, YearTransform
from pyiceberg.types import NestedField

from lakepub.config import DatasetSpec
from lakepub.projection.partitioning import iceberg_type
from lakepub.store.catalog import create_or_load
from lakepub.store.layout import TABLE_PROPERTIES

DEFINITION_PROPERTY = "lakepub.definition"


def published_schema(spec: DatasetSpec) -> Schema:
    """The Iceberg schema of the published table: the kind's output columns, ids from 1."""
    fields = [NestedField(i, f.name, iceberg_type(f.type), required=False)
              for i, f in enumerate(spec.kind.output_schema(), start=1)]
    return Schema(*fields)


def ensure_published(catalog: Catalog, namespace: str, spec: DatasetSpec) -> Table:
    """Create the dataset's published table if it does not exist yet, and load it."""
    schema = published_schema(spec)
    partitioning = spec.partition.iceberg_spec(schema)
    # One small file per partition: stats serve only the partition column (for other tools'
    # filtered overwrites, which need them to tell whole-file matches from partial ones).
    props = {**TABLE_PROPERTIES, "write.metadata.metrics.default": "none",
             DEFINITION_PROPERTY: json.dumps(definition_of(spec), sort_keys=True)}
    for column in spec.partition.columns:
        props[f"write.metadata.metrics.column.{column}"] = "full"
    return create_or_load(catalog, (namespace, spec.name), lambda: catalog.create_table(
        (namespace, spec.name), schema=schema, partition_spec=partitioning, properties=props))


def definition_of(spec: DatasetSpec) -> dict[str, Any]:
    """What the dataset means: its kind's ``describe()`` and the entity it publishes."""
    return {**spec.kind.describe(), "entity": spec.entity}


def recorded_definition(table: Table) -> dict[str, Any] | None:
    """What the definition meant when the table was created (None for tables from before)."""
    text = table.metadata.properties.get(DEFINITION_PROPERTY)
    return json.loads(text) if text else None


def partition_of(table: Table) -> str | None:
    """The table's real partition spec in the definition's syntax (``month(day)``, ``none``), or
    None if it is not one a definition can declare (changed by another tool)."""
    spec = table.metadata.spec()  # the current one: Iceberg keeps every old spec, undone evolutions too
    if not spec.fields:
        return "none"
    if len(spec.fields) != 1:
        return None
    field = spec.fields[0]
    column = table.schema().find_column_name(field.source_id)
    transform = field.transform
    if isinstance(transform, BucketTransform):
        return f"bucket({transform.num_buckets}, {column})"
    for name, cls in (("identity", IdentityTransform), ("day", DayTransform), ("month", MonthTransform),
                      ("year", YearTransform)):
        if isinstance(transform, cls):
            return f"{name}({column})"
    return None
