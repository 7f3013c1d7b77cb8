"""``lakepub query`` on the quick path: DuckDB only, the views taken from ``.lakepub/views``.

``Workspace.query`` resolves each published snapshot into a ``read_parquet`` view
(``lakepub.views``) and stores the resolution under the table's metadata location in
``.lakepub/views/<namespace>.<table>.json``. Here the catalog row names the current location; a
stored resolution for exactly that location and snapshot (files under the table's folder, the
checks of ``views._cached_files``) gives the same view, with the columns by field id read from
the metadata JSON's current schema. Anything else (no stored resolution yet, a view that would be
an ``iceberg_scan``: delete files, a name mapping, a type without a plain DuckDB equivalent)
declines, and the full path runs (and stores the resolution for next time).

The database is sandboxed as ``duck.sandboxed`` does (private temp folder, the same allowed
folders, no external access, locked configuration) but loads no extension: every view is plain
Parquet, and a query that needs an extension fails here and is run again by the full path, whose
answer (or error) is the one printed. The statement is checked by ``duck.check_read_only``; the
read is recorded for ``lakepub consumers`` by the same ``observe_connection``. Rows are rendered
by ``output.render_query`` from DuckDB's Python values when every column has a type whose Python
value is the one pyarrow would give (integers, VARCHAR, BOOLEAN, DOUBLE, DATE, DECIMAL; HUGEINT
as the Decimal pyarrow gives); any other type goes through pyarrow, as the full path does.
"""

from __future__ import annotations

import json
import re
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

from lakepub.quick.catalog import QuickTable, QuickWorkspace, Unsupported, retirement

CACHE_FORMAT = 2  # views.CACHE_FORMAT
NAME_MAPPING_PROPERTY = "schema.name-mapping.default"
_DUCK_TYPES = {"boolean": "BOOLEAN", "int": "INTEGER", "long": "BIGINT", "float": "FLOAT", "double": "DOUBLE",
               "date": "DATE", "time": "TIME", "timestamp": "TIMESTAMP", "timestamptz": "TIMESTAMPTZ",
               "string": "VARCHAR", "binary": "BLOB"}
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
_PLAIN_RESULT = {"BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER",
                 "UBIGINT", "DOUBLE", "VARCHAR", "DATE"}


# The full path's database has the avro and iceberg extensions loaded (~0.25 s here): their
# functions, settings and catalog rows are only its own, so a statement that may list them declines.
_INTROSPECTION = re.compile(r"\b(duckdb_\w+|pg_\w+|current_setting|routines)\b", re.IGNORECASE)


def run(workspace: Path, sql: str, fmt: str) -> str:
    """What ``lakepub query`` prints; raises (Unsupported, a DuckDB error...) for the full path to run."""
    if _INTROSPECTION.search(sql):
        raise Unsupported("a statement that may list the functions or settings of an extension")
    qw = QuickWorkspace.open(workspace)
    try:
        views = {}
        for name in sorted([*qw.datasets, *qw.derived]):
            table = qw.table(name)
            if table is not None and table.metadata.current_snapshot_id is not None and retirement(table) is None:
                views[name] = (table.metadata_location, _view_sql(qw, name, table))
        for name in qw.record["partners"]:  # Workspace.published_views: dual.partner_views (no retirement check)
            table = qw.table(name)
            if table is not None and table.metadata.current_snapshot_id is not None:
                views[name] = (table.metadata_location, _view_sql(qw, name, table))
    finally:
        qw.close()
    return _query(qw, views, sql, fmt)  # raises on anything: the caller runs the full path


def _view_sql(qw: QuickWorkspace, name: str, table: QuickTable) -> str:
    """``views.Resolution.view_sql`` of the stored resolution of the table's current snapshot."""
    raw = table.raw
    if table.metadata.properties.get(NAME_MAPPING_PROPERTY):
        raise Unsupported("name mapping")
    schema = next(s for s in raw["schemas"] if s["schema-id"] == raw["current-schema-id"])
    columns = []
    for f in schema["fields"]:
        dtype = _duck_type(f["type"])
        if dtype is None or f.get("initial-default") is not None:
            raise Unsupported("an iceberg_scan view")
        columns.append((int(f["id"]), str(f["name"]), dtype))
    file = qw.root / ".lakepub" / "views" / (re.sub(r"[^A-Za-z0-9_.-]", "_", f"{qw.namespace}.{name}") + ".json")
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise Unsupported("no stored view") from None
    folder = str(raw["location"]).rstrip("/") + "/"
    files = record.get("files") if isinstance(record, dict) else None
    if not (record.get("format") == CACHE_FORMAT and record.get("metadata_location") == table.metadata_location
            and record.get("snapshot_id") == table.metadata.current_snapshot_id and files
            and isinstance(files, list) and all(isinstance(f, str) and f.startswith(folder) for f in files)
            and isinstance(record.get("by_name"), bool)):
        raise Unsupported("stored view is not the current one")
    paths = ", ".join(f"'{_q(f)}'" for f in files)
    if record["by_name"]:
        source = f"read_parquet([{paths}], hive_partitioning=false)"
    else:
        fields = ", ".join(f"{fid}: {{name: '{_q(n)}', type: '{dtype}', default_value: NULL}}" for fid, n, dtype in columns)
        source = f"read_parquet([{paths}], schema=MAP {{{fields}}}, hive_partitioning=false)"
    from lakepub import duck

    return f"CREATE OR REPLACE TEMP VIEW {duck.name(name)} AS SELECT * FROM {source}"


def _duck_type(iceberg_type: Any) -> str | None:
    if not isinstance(iceberg_type, str):
        return None  # struct, list, map
    m = _DECIMAL.match(iceberg_type)
    if m:
        return f"DECIMAL({int(m.group(1))},{int(m.group(2))})"
    return _DUCK_TYPES.get(iceberg_type)


def _query(qw: QuickWorkspace, views: dict[str, tuple[str, str]], sql: str, fmt: str) -> str:
    import duckdb

    from lakepub import duck, output
    from lakepub.contract import consumers

    published = {name: location for name, (location, _) in views.items()}
    allowed = duck.sandbox_directories(qw.record["catalog"].get("warehouse"), published.values())
    folders = tuple(sorted({d if d.endswith("/") else d + "/" for d in allowed}))
    con = duckdb.connect(config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"})
    try:
        con.execute(f"SET temp_directory='{_q(duck._private_temp_directory())}'")  # noqa: SLF001 - same package
        con.execute(f"SET allowed_directories=[{', '.join(repr_sql(f) for f in folders)}]")
        con.execute("SET enable_external_access=false")
        con.execute("SET lock_configuration=true")
        duck.check_read_only(con, sql)
        for _, view in views.values():
            con.execute(view)
        result = con.execute(sql)
        names = [d[0] for d in result.description]
        types = [str(d[1]) for d in result.description]
        if len(set(names)) == len(names) and all(_plain(t) for t in types):
            rows = result.fetchall()
            dates = [i for i, t in enumerate(types) if t == "DATE"]
            if any(not (type(r[i]) is date and date.min < r[i] < date.max) for r in rows for i in dates
                   if r[i] is not None):  # infinity clamped to date.max/min, BC dates as str: pyarrow refuses
                raise Unsupported("a DATE outside Python's range")
            huge = [i for i, t in enumerate(types) if t == "HUGEINT"]
            if huge:  # pyarrow receives HUGEINT as decimal128(38, 0)
                rows = [tuple(Decimal(v) if i in huge and v is not None else v for i, v in enumerate(r)) for r in rows]
            table: Any = _Rows(names, rows)
        else:
            table = result.to_arrow_table()
        consumers.observe_connection(con, qw.root, sql, published, "query")
        return output.render_query(table, fmt)
    finally:
        con.close()


def _plain(duck_type: str) -> bool:
    return duck_type in _PLAIN_RESULT or duck_type == "HUGEINT" or duck_type.startswith("DECIMAL(")


class _Rows:
    """The two things ``output.render_query`` asks of a pyarrow table."""

    def __init__(self, names: list[str], rows: list[tuple[Any, ...]]):
        self.column_names = names
        self._rows = rows

    def to_pylist(self) -> list[dict[str, Any]]:
        return [dict(zip(self.column_names, r)) for r in self._rows]


def _q(text: str) -> str:
    return str(text).replace("'", "''")


def repr_sql(text: str) -> str:
    return f"'{_q(text)}'"
