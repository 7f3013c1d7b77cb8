"""The live state of every entity at a ledger snapshot: what a new dataset is built from.

The ledger holds every accepted (key, version) with its state; an entity's state is its highest
version, and it is live unless that version is a delete. A dataset added to an entity that
already has history is built from these states at the ledger snapshot its siblings' published
snapshots name, and committed with their positions (``Publisher.catch_up``), so from then on it
is maintained incrementally with them. ``lakepub verify --deep`` rebuilds every dataset the same
way and compares. Cost: one DuckDB scan of the ledger snapshot with a window per key (~0.3 s
per 1M ledger rows here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
from pyiceberg.table import Table

from lakepub import duck
from lakepub.contract.model import Contract
from lakepub.store.layout import columns_at

if TYPE_CHECKING:  # a publish on the key-index path never opens DuckDB: imported on use
    import duckdb


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def live_states(con: duckdb.DuckDBPyConnection, ledger: Table, snapshot_id: int | None, contract: Contract
                ) -> pa.Table:
    """Key, version and state fields of every live entity at ``snapshot_id`` (none before the first)."""
    entity = contract.entity
    names = [*entity.key, entity.version, *contract.state_names]
    schema = pa.schema([contract.arrow_schema.field(n) for n in names])
    if snapshot_id is None:
        return schema.empty_table()
    keys = ", ".join(_ident(k) for k in entity.key)
    live = f"WHERE NOT {_ident(entity.deleted)}" if entity.deleted else ""
    present = columns_at(ledger, snapshot_id)  # a snapshot from before a contract evolution lacks its new fields
    sql = f"""
        SELECT {', '.join(_ident(n) if present is None or n in present else f'NULL AS {_ident(n)}' for n in names)} FROM (
            SELECT * FROM {duck.scan_sql(ledger.metadata_location, snapshot_id)}
            QUALIFY row_number() OVER (PARTITION BY {keys} ORDER BY {_ident(entity.version)} DESC) = 1
        ) {live}"""
    return con.execute(sql).to_arrow_table().cast(schema)
