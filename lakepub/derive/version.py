"""Data versions: what a dataset's published rows mean, per dataset and per column, chained.

A **data version** is ``sha256:<hex>`` over the canonical JSON of a definition's semantic fields:

- a base dataset: its kind's ``describe()`` (kind, partition, group_by/measures or key/columns)
  and entity, and the contract's sha256 (``ops/data_version.compute``: unchanged, so versions
  recorded before this module stay valid);
- a derived dataset: the query normalised by sqlglot, its inputs' partition expressions, its
  output columns and types, its partitioning, and the **column versions of the upstream columns
  it reads** (``schema.columns_read``), so the version chains through the graph.

``description``, ``owner``, ``schedule`` and ``lookback`` are not semantic: they change the
definition's *full* hash (``definition_sha``, recorded too, which is how ``lakepub plan`` tells a
non-breaking change) but never the data version.

**Column versions** carry the chain at column grain (what Minerva lacked): an upstream change to
a column a downstream does not read leaves the downstream's data version alone. A base column's
version hashes the rows' shape (kind, group_by or key, entity and its key/version/deleted roles)
with what the column is computed from (the measure, or the field, and the contract types of the
fields it reads); the pseudo-column ``*`` (the row set) hashes the shape alone. A derived
dataset's column hashes its row shape (its query without the select list, what that reads, and
its inputs' row sets) with its own expression and the versions of the columns that expression
reads (sqlglot, ``schema.column_lineage``); for a query that is not one flat SELECT (CTEs,
subqueries, set operations, DISTINCT) every column takes the dataset's data version.
A contract edit that keeps the fields a column reads and the entity's roles therefore changes
the base dataset's data version but not its column versions.

Cost: a few sha256 of a few hundred bytes per dataset.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from lakepub.derive.model import DerivedSpec, Graph
from lakepub.derive.schema import ROWS, Resolved

PREFIX = "sha256:"


def digest(payload: Any) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest()


def remembered_digest(key: tuple, payload: Any) -> str:
    """``digest(payload)``, remembered under ``key``, which must determine ``payload`` (so a changed
    payload is another key, never a stale digest): an input fingerprint (``state.fingerprint``)."""
    found = _DIGESTS.get(key)
    if found is None:
        found = digest(payload)
        if len(_DIGESTS) >= _DIGESTS_MAX:
            _DIGESTS.clear()
        _DIGESTS[key] = found
    return found


_DIGESTS: dict[tuple, str] = {}
_DIGESTS_MAX = 65536


@dataclass(frozen=True)
class Version:
    """The desired version of one dataset, with what it is made of (for ``plan``'s reasons)."""

    data_version: str
    columns: dict[str, str]  # column (and ROWS) -> column version
    definition: str = ""  # sha of the dataset's own semantic definition (no upstream)
    upstream: dict[str, str] = field(default_factory=dict)  # "dataset.column" -> column version read
    definition_sha: str = ""  # the full definition, non-semantic fields included

    def parts(self) -> dict[str, Any]:
        """What a derived snapshot records besides the data version (``lakepub.data-version-parts``)."""
        return {"definition": self.definition, "upstream": self.upstream, "definition_sha": self.definition_sha}


def base_version(spec) -> Version:
    """A base dataset's data version (as ``ops/data_version`` always computed it) and column versions."""
    from lakepub.ops.data_version import compute
    from lakepub.store.published import definition_of

    definition = definition_of(spec)
    data_version = compute(definition, spec.contract.sha256)
    entity = spec.contract.entity
    shape = {k: v for k, v in definition.items() if k in ("kind", "group_by", "key", "entity")}
    shape["roles"] = {"key": list(entity.key), "version": entity.version, "deleted": entity.deleted}
    types = {f.name: str(f.type) for f in spec.contract.arrow_schema}
    columns = {ROWS: digest({"rows": shape})}
    measures = definition.get("measures", {})
    for name in spec.kind.output_schema().names:
        if name in measures:
            text = measures[name]
            source = text[text.index("(") + 1:text.rindex(")")].strip() if "(" in text else ""
            made_of = {"measure": text, "type": types.get(source)}
        else:
            made_of = {"field": name, "type": types.get(name)}
        columns[name] = digest({"rows": shape, "column": made_of})
    return Version(data_version, columns, definition=data_version, definition_sha=data_version)


def derived_version(spec: DerivedSpec, resolved: Resolved, upstream_columns: dict[str, dict[str, str]]) -> Version:
    """A derived dataset's data version from its definition and the versions of what it reads."""
    own = {"kind": "sql", "query": spec.normalized_sql, "inputs": {n: str(i) for n, i in spec.inputs.items()},
           "partition": str(spec.partition), "columns": [[f.name, str(f.type)] for f in resolved.schema]}
    upstream = {f"{name}.{col}": upstream_columns[name][col]
                for name, cols in resolved.reads.items() for col in cols if col in upstream_columns[name]}
    for name, cols in resolved.reads.items():  # a column the upstream has no version for: its whole version
        for col in cols:
            if col not in upstream_columns[name]:
                upstream[f"{name}.{col}"] = upstream_columns[name].get(ROWS, "")
    definition = digest(own)
    data_version = digest({"definition": definition, "upstream": upstream})
    full = digest({"semantic": own, "lookback": spec.lookback, "description": spec.description,
                   "owner": spec.owner, "schedule": spec.schedule})
    columns = _column_versions(spec, resolved, upstream_columns, data_version)
    return Version(data_version, columns, definition=definition, upstream=upstream, definition_sha=full)


def versions(graph: Graph, resolved: dict[str, Resolved]) -> dict[str, Version]:
    """The desired version of every dataset of the graph (base and derived, in graph order)."""
    out = {name: base_version(spec) for name, spec in graph.base.items()}
    for name in graph.order:
        spec = graph.derived[name]
        out[name] = derived_version(spec, resolved[name], {u: out[u].columns for u in spec.inputs})
    return out


def _column_versions(spec: DerivedSpec, resolved: Resolved, upstream_columns: dict[str, dict[str, str]],
                     data_version: str) -> dict[str, str]:
    """Per output column: its expression and the upstream columns it reads, with the row shape
    (the query without its select list, and what that reads); every column takes the data
    version where the query is not flat (``schema.column_lineage``)."""
    lineage = resolved.lineage
    if lineage is None:
        return {ROWS: data_version, **{f.name: data_version for f in resolved.schema}}

    def versions_of(reads) -> dict[str, str]:
        return {f"{n}.{c}": upstream_columns[n].get(c, upstream_columns[n].get(ROWS, "")) for n, c in sorted(reads)}

    shape = {"shape": lineage.shape, "inputs": {n: str(i) for n, i in spec.inputs.items()},
             "partition": str(spec.partition), "reads": versions_of(lineage.shape_reads),
             "rows": {n: upstream_columns[n].get(ROWS, "") for n in sorted(spec.inputs)}}
    out = {ROWS: digest(shape)}
    types = {f.name: str(f.type) for f in resolved.schema}
    for name, (expression, reads) in lineage.columns.items():
        out[name] = digest({**shape, "column": expression, "type": types[name], "column_reads": versions_of(reads)})
    return out
