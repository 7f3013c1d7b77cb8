"""DuckDB connections that read Iceberg tables through the ``iceberg`` extension, offline.

The extensions come from the ``duckdb-extension-*`` wheels pinned to the same version as
``duckdb``; they are loaded from their files, so nothing is downloaded at run time. ``avro`` is
loaded before ``iceberg`` (otherwise iceberg would try to fetch it), ``httpfs`` only for S3.
"""

from __future__ import annotations

import importlib
import threading
from pathlib import Path
from typing import Mapping
from urllib.parse import urlparse

import duckdb

from lakepub.errors import ConfigError


def extension_path(name: str) -> Path:
    module = importlib.import_module(f"duckdb_extension_{name}")
    folder = Path(module.__file__).parent / "extensions" / f"v{duckdb.__version__}"
    path = folder / f"{name}.duckdb_extension"
    if not path.is_file():
        raise ConfigError(
            f"DuckDB extension '{name}' for duckdb {duckdb.__version__} not found at {path}; "
            f"install duckdb-extension-{name}=={duckdb.__version__}"
        )
    return path


_BASES: dict[tuple[tuple[str, str], ...], duckdb.DuckDBPyConnection] = {}
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


def _new_database(props: dict[str, str], s3: bool | None) -> duckdb.DuckDBPyConnection:
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
    else:
        parts.append("PROVIDER credential_chain")
    parts.append(f"REGION '{_q(props.get('s3.region', 'us-east-1'))}'")
    endpoint = props.get("s3.endpoint")
    if endpoint:
        url = urlparse(endpoint if "://" in endpoint else f"http://{endpoint}")
        parts.append(f"ENDPOINT '{_q(url.netloc)}'")
        parts.append("URL_STYLE 'path'")
        parts.append(f"USE_SSL {'true' if url.scheme == 'https' else 'false'}")
    con.execute(f"CREATE OR REPLACE SECRET lakepub_s3 ({', '.join(parts)})")


def scan_sql(metadata_location: str, snapshot_id: int | None = None) -> str:
    """SQL table expression reading one Iceberg snapshot (the current one by default)."""
    if snapshot_id is None:
        return f"iceberg_scan('{_q(metadata_location)}')"
    return f"iceberg_scan('{_q(metadata_location)}', snapshot_from_id={int(snapshot_id)})"


def _q(text: str) -> str:
    return str(text).replace("'", "''")
