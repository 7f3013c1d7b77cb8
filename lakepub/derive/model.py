"""A derived dataset's definition (``projection: {kind: sql}``) and the graph the definitions form.

```yaml
name: orders_monthly
projection:
  kind: sql
  inputs:
    orders_daily: month(day)      # output partition P reads the orders_daily rows whose month(day) is P
    customers_current: all        # every output partition reads the whole input (a dimension)
  query: |
    SELECT CAST(date_trunc('month', day) AS DATE) AS month, sum(cents) AS cents FROM orders_daily GROUP BY 1
partition: month(month)
lookback: 2                       # the newest 2 non-null partitions are recomputed by every run (late data)
description: ...                  # description, owner, schedule: not part of the data version
```

A derived dataset has no source, contract or entity: it reads *published* datasets (base or
derived) by name. The invariants checked when the workspace loads, each an exit-2 error naming
the file and the key:

- every input names a dataset of the workspace, and the graph of inputs has no cycle;
- the query parses as DuckDB SQL (sqlglot), is one query, and reads only datasets listed under
  ``inputs`` (its table references, CTE names aside within their scope; no table functions, no qualified names: a
  derived dataset reads nothing but its inputs' published snapshots);
- an input expression is ``all`` or ``day|month|year|identity(col)`` with the same transform as
  the output ``partition`` (so an input value P is an output partition label P).

Cost: one sqlglot parse per derived dataset (~5-10 ms, plus sqlglot's import, ~0.5 s) the first
time a query is seen; after that a lookup in ``.lakepub/derive/queries.json`` (``QueryCache``).
Nothing here imports DuckDB or pyiceberg.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from lakepub.errors import ConfigError
from lakepub.projection.partitioning import PartitionBy
from lakepub.yamlfile import File, parse

SQL_KIND = "sql"
ALL = "all"
_INPUT_KINDS = ("day", "month", "year", "identity")


@dataclass(frozen=True)
class InputSpec:
    """One input of a derived dataset: which of its rows an output partition reads."""

    dataset: str
    expr: PartitionBy | None  # None: ``all`` (every output partition reads the whole input)

    def __str__(self) -> str:
        return ALL if self.expr is None else str(self.expr)


@dataclass(frozen=True)
class DerivedSpec:
    """A derived dataset of the declarative catalog."""

    name: str
    query: str
    inputs: dict[str, InputSpec]
    partition: PartitionBy
    lookback: int = 0
    description: str = ""
    owner: str = ""
    schedule: str = ""
    path: Path | None = None
    normalized_sql: str = ""  # the query as sqlglot normalises it (what the data version hashes)

    @property
    def where(self) -> str:
        return str(self.path)

    @property
    def partitioned_inputs(self) -> dict[str, InputSpec]:
        return {n: i for n, i in self.inputs.items() if i.expr is not None}


class _Projection(File):
    kind: str
    inputs: dict[str, str]
    query: str


class _DerivedFile(File):
    name: str
    projection: _Projection
    partition: str | None = None
    lookback: int = 0
    description: str | None = None
    owner: str | None = None
    schedule: str | None = None


def is_derived(raw: Mapping[str, Any]) -> bool:
    """Whether a dataset YAML mapping declares a derived dataset (``projection.kind: sql``)."""
    projection = raw.get("projection")
    return isinstance(projection, Mapping) and projection.get("kind") == SQL_KIND


def load_derived(path: Path, raw: dict[str, Any], checked: "QueryCache | None" = None) -> DerivedSpec:
    """The derived dataset a YAML mapping declares (ConfigError naming the file and key);
    ``checked``: queries already checked (``QueryCache``), so loading does not parse them again."""
    doc: _DerivedFile = parse(_DerivedFile, raw, path)
    if not doc.name.isidentifier():
        raise ConfigError(f"{path}: 'name': dataset name '{doc.name}' must be a SQL identifier (letters, digits, _)")
    if "__rebuild_" in doc.name or doc.name.endswith(("__ledger", "__rejects")) or doc.name == "lakepub_audit":
        raise ConfigError(f"{path}: 'name': '{doc.name}' is the name of one of lakepub's own tables (ledgers, rejects, "
                          "the audit table, offline rebuilds: __rebuild_); choose another name")
    if doc.lookback < 0:
        raise ConfigError(f"{path}: 'lookback' must be 0 or more partitions, not {doc.lookback}")
    partition = PartitionBy.parse(doc.partition or "none", f"{path}: 'partition'")
    if not doc.projection.inputs:
        raise ConfigError(f"{path}: 'projection.inputs' must list at least one dataset the query reads")
    inputs = {}
    for name, text in doc.projection.inputs.items():
        key = f"projection.inputs.{name}"
        expr = None if text.strip() == ALL else PartitionBy.parse(text, f"{path}: '{key}'")
        if expr is not None:
            if expr.kind not in _INPUT_KINDS:
                raise ConfigError(f"{path}: '{key}': {expr} is not understood as an input partition expression "
                                  "(use all, day(col), month(col), year(col) or identity(col))")
            if partition.kind == "none":
                raise ConfigError(f"{path}: '{key}': the dataset is not partitioned (partition: none), so every "
                                  f"input reads all its rows: write '{name}: all'")
            if expr.kind != partition.kind:
                raise ConfigError(f"{path}: '{key}': {expr} must use the output partition's transform "
                                  f"({partition.kind}, from partition: {partition}) so that its value names an "
                                  "output partition")
        inputs[name] = InputSpec(name, expr)
    normalized = checked.check(doc.projection.query, set(inputs), path) if checked is not None else \
        check_query(doc.projection.query, set(inputs), path)
    return DerivedSpec(name=doc.name, query=doc.projection.query, inputs=inputs, partition=partition,
                       lookback=doc.lookback, description=doc.description or "", owner=doc.owner or "",
                       schedule=doc.schedule or "", path=path, normalized_sql=normalized)


def check_query(query: str, inputs: set[str], path: Path) -> str:
    """The query normalised by sqlglot; ConfigError if it does not parse, is not one query, or
    reads a table that is not an input."""
    import sqlglot
    from sqlglot import exp

    key = "projection.query"
    try:
        statements = [s for s in sqlglot.parse(query, read="duckdb") if s is not None]
    except sqlglot.errors.SqlglotError as exc:
        raise ConfigError(f"{path}: '{key}' is not valid DuckDB SQL ({' '.join(str(exc).split())[:200]})") from None
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        raise ConfigError(f"{path}: '{key}' must be one SELECT query")
    tree = statements[0]
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    for table in tree.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            raise ConfigError(f"{path}: '{key}' reads {table.this.sql(dialect='duckdb')[:60]}: a derived query "
                              "reads only the datasets listed under projection.inputs")
        if table.db or table.catalog:
            raise ConfigError(f"{path}: '{key}' reads {table.sql(dialect='duckdb')}: name the input dataset "
                              "without a schema or catalog")
        if table.name in ctes:
            continue
        if table.name not in inputs:
            _not_an_input(path, table.name, inputs)
    # A CTE's name is a CTE only within its scope: elsewhere DuckDB reads that name as a file (a
    # replacement scan, e.g. "dir/*.parquet"). sqlglot's scopes resolve CTE references; any other
    # table source must be an input.
    from sqlglot.optimizer.scope import traverse_scope

    try:
        scopes = list(traverse_scope(tree))
    except Exception:  # noqa: BLE001 - scopes not understood: no table may share a CTE's name
        scopes = None
    if scopes is None:
        for table in tree.find_all(exp.Table):
            if table.name in ctes and table.name not in inputs:
                raise ConfigError(f"{path}: '{key}' reads '{table.name}', a CTE's name that lakepub cannot place in "
                                  "its scope: give the CTE another name")
    else:
        for scope in scopes:
            for source in scope.sources.values():
                if isinstance(source, exp.Table) and source.name not in inputs:
                    _not_an_input(path, source.name, inputs)
    # Comments are not part of the meaning: sqlglot keeps them unless told not to.
    return tree.sql(dialect="duckdb", normalize=True, pretty=False, comments=False)


CHECK_FORMAT = "3"  # of check_query (2: normalised SQL without comments; 3: CTE scopes); part of the cache key


def _not_an_input(path: Path, name: str, inputs: set[str]) -> None:
    raise ConfigError(f"{path}: 'projection.query' reads '{name}', which is not listed under projection.inputs "
                      f"({', '.join(sorted(inputs))}): list it with the rows a partition reads (or all)")


class QueryCache:
    """Queries that passed ``check_query``, by sha256 of the query and its inputs, kept in
    ``<workspace>/.lakepub/derive/queries.json``: every command loads the workspace, and sqlglot's
    import and parse (~0.5 s, then ~5 ms per query) would otherwise be paid by ``lakepub run`` of a
    base dataset too. A query that failed is never cached (it is checked, and refused, each time)."""

    def __init__(self, folder: Path | None):
        self.folder, self.entries, self.dirty = folder, {}, False
        if folder is not None:
            try:
                import json

                loaded = json.loads((folder / "queries.json").read_text(encoding="utf-8"))
                if isinstance(loaded, dict) and all(isinstance(v, str) for v in loaded.values()):
                    self.entries = loaded
            except (OSError, ValueError):
                pass

    def check(self, query: str, inputs: set[str], path: Path) -> str:
        import hashlib

        key = hashlib.sha256("\0".join([CHECK_FORMAT, query, *sorted(inputs)]).encode("utf-8")).hexdigest()
        if key not in self.entries:
            self.entries[key] = check_query(query, inputs, path)
            self.dirty = True
        return self.entries[key]

    def save(self) -> None:
        """Best effort, written atomically."""
        if self.folder is None or not self.dirty:
            return
        import json
        import os

        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            temporary = self.folder / f".queries.json.{os.getpid()}"
            temporary.write_text(json.dumps(self.entries), encoding="utf-8")
            os.replace(temporary, self.folder / "queries.json")
        except OSError:
            pass


def check_graph(base: Mapping[str, Any], derived: Mapping[str, DerivedSpec]) -> list[str]:
    """The derived datasets in graph order (upstreams first); ConfigError on a name defined
    twice, an unknown input or a cycle."""
    for name, spec in derived.items():
        if name in base:
            raise ConfigError(f"{spec.path}: 'name': dataset '{name}' is also defined in {base[name].path}")
        for upstream in spec.inputs:
            if upstream not in base and upstream not in derived:
                known = ", ".join(sorted([*base, *derived]))
                raise ConfigError(f"{spec.path}: 'projection.inputs.{upstream}': unknown dataset '{upstream}' "
                                  f"(datasets: {known})")
    order: list[str] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = path[path.index(name):] + [name]
            spec = derived[cycle[0]]
            raise ConfigError(f"{spec.path}: 'projection.inputs.{cycle[1]}': the inputs form a cycle "
                              f"({' -> '.join(cycle)}); a dataset cannot read itself, directly or not")
        state[name] = 1
        for upstream in derived[name].inputs:
            if upstream in derived:
                visit(upstream, path + [name])
        state[name] = 2
        order.append(name)

    for name in sorted(derived):
        visit(name, [])
    return order


def downstream_of(derived: Mapping[str, DerivedSpec], names: set[str]) -> set[str]:
    """``names`` and every derived dataset that reads one of them, directly or not."""
    out = set(names)
    changed = True
    while changed:
        changed = False
        for name, spec in derived.items():
            if name not in out and out & set(spec.inputs):
                out.add(name)
                changed = True
    return out


def upstream_of(derived: Mapping[str, DerivedSpec], names: set[str]) -> set[str]:
    """``names`` and every derived dataset they read, directly or not (base datasets left out)."""
    out: set[str] = set()
    todo = [n for n in names if n in derived]
    while todo:
        name = todo.pop()
        if name not in out:
            out.add(name)
            todo.extend(u for u in derived[name].inputs if u in derived)
    return out


@dataclass
class Graph:
    """Base and derived datasets of a workspace (what ``lakepub plan/reconcile`` walk)."""

    base: dict[str, Any]
    derived: dict[str, DerivedSpec]
    order: list[str] = field(default_factory=list)  # derived, upstreams first
