"""DuckDB connections that read Iceberg tables through the ``iceberg`` extension, offline.

The extensions come from the ``duckdb-extension-*`` wheels pinned to the same version as
``duckdb``; they are loaded from their files, so nothing is downloaded at run time. ``avro`` is
loaded before ``iceberg`` (otherwise iceberg would try to fetch it), ``httpfs`` only for S3.

Two kinds of database: ``connect`` gives an unrestricted one (publishes, verify, compaction and
``Workspace.connect()``), ``sandboxed`` a locked one for user SQL (``lakepub query``,
``Workspace.query``): external access disabled except for the tables' folders, configuration
locked, and only SELECT-like statements accepted (``check_read_only``). DuckDB's settings are per
database, so the two never share one: locking the sandbox does not lock the other connections.
DuckDB also lets a database read its ``temp_directory`` (by default ``.tmp`` under the working
directory, whatever is in it), so a sandbox spills to a private folder of its own instead
(``tempfile.mkdtemp``, removed when the process exits): the only folders a sandboxed query can
read are the tables' folders and that one, which holds nothing but DuckDB's own spill files.
"""

from __future__ import annotations

import atexit
import importlib
import re
import shutil
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping
from urllib.parse import urlparse

from lakepub.errors import ConfigError, QueryError

if TYPE_CHECKING:  # imported on use: the publish path uses scan_sql and name without a database
    import duckdb


def extension_path(name: str) -> Path:
    import duckdb

    module = importlib.import_module(f"duckdb_extension_{name}")
    folder = Path(module.__file__).parent / "extensions" / f"v{duckdb.__version__}"
    path = folder / f"{name}.duckdb_extension"
    if not path.is_file():
        raise ConfigError(
            f"DuckDB extension '{name}' for duckdb {duckdb.__version__} not found at {path}; "
            f"install duckdb-extension-{name}=={duckdb.__version__}"
        )
    return path


_BASES: dict[tuple[tuple[str, str], ...], "duckdb.DuckDBPyConnection"] = {}
_LOCK = threading.Lock()


def connect(catalog_properties: Mapping[str, str] | None = None, *, s3: bool | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection able to ``iceberg_scan`` the warehouse of the given catalog.

    Loading the extensions costs ~0.1 s, so one in-memory database per catalog configuration is
    kept for the process and each call returns a new connection (cursor) to it. Views that
    callers create should be TEMP views: those are private to the returned connection.
    """
    key = tuple(sorted((str(k), str(v)) for k, v in (catalog_properties or {}).items())) + (("s3", str(s3)),)
    with _LOCK:  # two threads may connect at once: load the extensions once
        base = _BASES.get(key)
        if base is None:
            base = _BASES[key] = _new_database(dict(catalog_properties or {}), s3)
    return base.cursor()


def sandboxed(catalog_properties: Mapping[str, str] | None, allowed_directories: Iterable[str]) -> duckdb.DuckDBPyConnection:
    """A connection to a locked database that can read only under ``allowed_directories``.

    After the extensions (and the S3 secret) are loaded: ``allowed_directories`` (folders, or
    ``s3://bucket/prefix/`` for an S3 warehouse; httpfs honours it), ``enable_external_access=false``
    (no other file or URL, no ATTACH, INSTALL or LOAD) and ``lock_configuration=true`` (no SET can
    undo it). ``temp_directory`` is set to a private folder first: DuckDB allows access to its temp
    directory, which by default is ``.tmp`` in the working directory (a user's folder).
    ``allowed_directories`` grants writes too, so run only what ``check_read_only``
    accepts. Like ``connect``, one database per configuration (and directory set) is kept for the
    process; views must be TEMP views.
    """
    folders = tuple(sorted({d if d.endswith("/") else d + "/" for d in allowed_directories}))
    props = dict(catalog_properties or {})
    key = tuple(sorted((str(k), str(v)) for k, v in props.items())) + (("sandbox", repr(folders)),)
    with _LOCK:
        base = _BASES.get(key)
        if base is None:
            base = _new_database(props, None)
            base.execute(f"SET temp_directory='{_q(_private_temp_directory())}'")
            listed = ", ".join(f"'{_q(f)}'" for f in folders)
            base.execute(f"SET allowed_directories=[{listed}]")
            base.execute("SET enable_external_access=false")
            base.execute("SET lock_configuration=true")
            _BASES[key] = base
    return base.cursor()


_TEMP_DIRECTORIES: list[str] = []


def _private_temp_directory() -> str:
    """A new empty folder for a sandboxed database's spill files, removed at process exit."""
    folder = tempfile.mkdtemp(prefix="lakepub-duck-")
    if not _TEMP_DIRECTORIES:
        atexit.register(lambda: [shutil.rmtree(f, ignore_errors=True) for f in _TEMP_DIRECTORIES])
    _TEMP_DIRECTORIES.append(folder)
    return folder


def sandbox_directories(warehouse: str | None, metadata_locations: Iterable[str]) -> list[str]:
    """The folders a sandboxed query may read: the warehouse (when it is a path or URI rather than
    a REST catalog's warehouse name) and the folder of every table outside it."""
    folders: list[str] = []
    if warehouse and ("://" in warehouse or warehouse.startswith("/")):
        folders.append(warehouse.rstrip("/") + "/")
    for location in metadata_locations:
        table_folder = location.rsplit("/metadata/", 1)[0] + "/"
        if not any(table_folder.startswith(f) for f in folders):
            folders.append(table_folder)
    return folders


READ_ONLY_HELP = ("only SELECT statements (also WITH ..., FROM ..., VALUES, DESCRIBE, SUMMARIZE, SHOW) "
                  "and EXPLAIN [ANALYZE] of one are allowed")
_EXPLAIN = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*EXPLAIN\s+(?:ANALY[SZ]E\s+)?(?:\([^()]*\)\s*)?",
                      re.IGNORECASE | re.DOTALL)


def check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Raise QueryError unless every statement of ``sql`` is a SELECT or an EXPLAIN of a SELECT.

    EXPLAIN ANALYZE runs the statement it explains, so that one is checked too; an EXPLAIN whose
    inner statement cannot be isolated is refused.
    """
    import duckdb

    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"query failed: {' '.join(str(exc).split())}") from None
    if not statements:  # empty, blanks or only comments: DuckDB would run nothing and return no result
        raise QueryError(f"lakepub query: the SQL holds no statement; {READ_ONLY_HELP}")
    for number, statement in enumerate(statements, 1):
        kind = statement.type
        if kind == duckdb.StatementType.EXPLAIN:
            match = _EXPLAIN.match(statement.query)
            try:
                inner = con.extract_statements(statement.query[match.end():]) if match else []
            except duckdb.Error:
                inner = []
            if len(inner) == 1 and inner[0].type == duckdb.StatementType.SELECT:
                continue
            kind_name = "EXPLAIN of a statement that is not a SELECT"
        elif kind == duckdb.StatementType.SELECT:
            continue
        else:
            kind_name = kind.name
        where = f" (statement {number} of {len(statements)})" if len(statements) > 1 else ""
        raise QueryError(f"lakepub query is read-only: {kind_name}{where} is refused; {READ_ONLY_HELP}")


def _new_database(props: dict[str, str], s3: bool | None) -> duckdb.DuckDBPyConnection:
    import duckdb

    con = duckdb.connect(config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"})
    for name in ("avro", "iceberg"):
        con.execute(f"LOAD '{extension_path(name)}'")
    if s3 is None:
        s3 = str(props.get("warehouse", "")).startswith(("s3://", "s3a://", "s3n://")) or "s3.endpoint" in props
    if s3:
        con.execute(f"LOAD '{extension_path('httpfs')}'")
        configure_s3(con, props)
    return con


def configure_s3(con: duckdb.DuckDBPyConnection, props: Mapping[str, str]) -> None:
    """Create a DuckDB S3 secret from pyiceberg's ``s3.*`` catalog properties."""
    parts = ["TYPE s3"]
    if props.get("s3.access-key-id"):
        parts.append(f"KEY_ID '{_q(props['s3.access-key-id'])}'")
        parts.append(f"SECRET '{_q(props.get('s3.secret-access-key', ''))}'")
        if props.get("s3.session-token"):  # temporary credentials (STS): pyarrow and boto3 send it too
            parts.append(f"SESSION_TOKEN '{_q(props['s3.session-token'])}'")
    else:
        parts.append("PROVIDER credential_chain")
    region = _region(props)
    if region or props.get("s3.access-key-id"):
        # keys without a region sign for us-east-1, as boto3 does; the credential chain without one
        # takes the region from where the AWS SDKs look (~/.aws/config)
        parts.append(f"REGION '{_q(region or 'us-east-1')}'")
    endpoint = props.get("s3.endpoint")
    if endpoint:
        # no scheme: HTTPS, as pyarrow (``S3FileSystem(scheme="https")``) writes the same files
        url = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
        parts.append(f"ENDPOINT '{_q(url.netloc)}'")
        parts.append("URL_STYLE 'path'")
        parts.append(f"USE_SSL {'true' if url.scheme == 'https' else 'false'}")
    con.execute(f"CREATE OR REPLACE SECRET lakepub_s3 ({', '.join(parts)})")


def _region(props: Mapping[str, str]) -> str | None:
    """The region DuckDB signs with: the catalog's ``s3.region`` (or ``client.region``), else the
    environment's ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, which the warehouse's boto3 clients read
    too, so a bucket outside us-east-1 configured only in the environment is read as it is written."""
    import os

    return (props.get("s3.region") or props.get("client.region") or os.environ.get("AWS_REGION")
            or os.environ.get("AWS_DEFAULT_REGION") or None)


def scan_sql(metadata_location: str, snapshot_id: int | None = None) -> str:
    """SQL table expression reading one Iceberg snapshot (the current one by default)."""
    if snapshot_id is None:
        return f"iceberg_scan('{_q(metadata_location)}')"
    return f"iceberg_scan('{_q(metadata_location)}', snapshot_from_id={int(snapshot_id)})"


def _q(text: str) -> str:
    return str(text).replace("'", "''")


def name(identifier: str) -> str:
    """A column name (a contract field: an identifier that may be an SQL keyword, ``order``)
    quoted for DuckDB SQL."""
    return '"' + str(identifier).replace('"', '""') + '"'
