"""The ledger rows of a batch's entities (orders), for the projection, and the key index a
publish leaves. Generic over the dataset's contract: rows come back as ``version, <the
contract's state fields>, floor`` (``key_index.payload_schema``; for orders ``version, day, cents,
deleted, floor``) with, per row, the position of its entity in the batch's distinct entities.

Two ways to find them, same answer (``tests/test_key_index.py`` and
``tests/test_ledger_generic.py`` check it):

* the ledger snapshot names key-index runs (``store/key_index.py``): binary searches in
  memory-mapped sorted runs, cost ~ batch x log(history); for a ledger on an object store the
  runs are mapped from a local disk cache (``store/cache.py``);
* otherwise a DuckDB join of the batch's entity keys (k1, k2) with a scan of the ledger snapshot,
  or on the key fields themselves for a ledger created before the keys, cost ~ history (a ledger
  created before the index or before order keys, or on an object store without a cache).
"""

from __future__ import annotations

import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table

from lakepub import duck
from lakepub.contract.model import Contract
from lakepub.contract.orders import ORDERS_CONTRACT
from lakepub.keys import ORDER_KEYS_VERSION, entity_keys
from lakepub.publish.versioning import BatchSide
from lakepub.store import key_index
from lakepub.store.cache import CachedKeyIndex, FileCache, remote
from lakepub.store.key_index import KeyIndex, Run
from lakepub.store.layout import columns_at, has_history, has_order_keys, order_keys_version

if TYPE_CHECKING:  # a publish on the key-index path never opens DuckDB: imported on use
    import duckdb

_WRITER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakepub-index")
# rows (key_index.payload_schema: version, state fields, floor), position of each one's entity
Found = tuple[pa.Table, np.ndarray]


@dataclass(frozen=True)
class Entities:
    """The distinct entities of a batch, as a lookup needs them: their key columns (one row per
    entity; a lookup reports positions in this table) and their keys by a key function
    (``keys_of``, else ``lakepub.keys.entity_keys`` computed once per function)."""

    table: pa.Table
    key_fields: tuple[str, ...]
    keys_of: Callable[[str | None], tuple[np.ndarray, np.ndarray]] | None = None
    _keys: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False, compare=False)

    def keys_for(self, version: str | None) -> tuple[np.ndarray, np.ndarray]:
        """The keys by the ledger's key function (None: a ledger without keys; the current one)."""
        if self.keys_of is not None:
            return self.keys_of(version)
        version = version or ORDER_KEYS_VERSION
        if version not in self._keys:
            self._keys[version] = entity_keys(self.table, self.key_fields, version)
        return self._keys[version]

    @classmethod
    def of(cls, side: "BatchSide | Entities", contract: Contract) -> "Entities":
        """A batch side of the projection as entities of ``contract``: its sorted distinct
        entities' key columns, with the keys it computed (``BatchSide.keys_for``)."""
        if isinstance(side, Entities):
            return side
        return cls(side.entities, tuple(contract.entity.key), side.keys_for)


class LedgerLookup:
    """Looks up one dataset's ledger, by its key index where the snapshot has one."""

    def __init__(self, con: Callable[[], duckdb.DuckDBPyConnection], ledger_location: str, *, use_index: bool = True,
                 contract: Contract = ORDERS_CONTRACT, cache: FileCache | None = None):
        """``cache``: where the index of a ledger on an object store is kept locally (without
        one, such a ledger is looked up by the DuckDB join)."""
        self._con = con
        self.contract = contract
        self.index_schema = key_index.index_schema(contract)
        folder = key_index.folder_of(ledger_location) if use_index else None
        self.index: KeyIndex | None = KeyIndex(folder, self.index_schema) if folder is not None else None
        if use_index and folder is None and cache is not None and remote(ledger_location):
            self.index = CachedKeyIndex(cache, ledger_location, self.index_schema)

    def _bind(self, ledger: Table) -> None:
        if isinstance(self.index, CachedKeyIndex):
            self.index.bind(ledger.io)

    def runs(self, ledger: Table, snapshot_id: int | None) -> list[Run] | None:
        """The index runs holding every row of the ledger snapshot (``[]`` when there is none
        yet), or None if it has no index this lookup can use."""
        if self.index is None or not has_order_keys(ledger):
            return None
        snapshot = ledger.metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
        if snapshot_id is not None and snapshot is None:
            return None  # expired meanwhile: the scan reports it
        return key_index.runs_of(snapshot)

    def rows(self, ledger: Table, snapshot_id: int | None, side: BatchSide | Entities) -> Found:
        """The ledger rows (at ``snapshot_id``) of the batch's entities (a ``BatchSide``: its orders)."""
        entities = Entities.of(side, self.contract)
        if snapshot_id is None or entities.table.num_rows == 0:
            return key_index.empty_payload(self.index_schema), np.zeros(0, dtype=np.int64)
        runs = self.runs(ledger, snapshot_id)
        keys = entities.keys_for(order_keys_version(ledger))  # the function the ledger's keys were made with
        if runs is not None and self.index is not None:
            try:
                self._bind(ledger)
                return self.index.lookup(runs, *keys)
            except OSError as exc:  # a run deleted by hand: the ledger itself is still whole
                _unreadable(exc, "this publish scans the ledger instead")
        return scan_rows(self._con(), duck.scan_sql(ledger.metadata_location, snapshot_id), entities,
                         keyed=has_order_keys(ledger), keys=keys, history=has_history(ledger), contract=self.contract,
                         present=columns_at(ledger, snapshot_id))

    def submit_runs_after(self, ledger: Table, base_snapshot_id: int | None, new_rows: pa.Table
                          ) -> Future[list[Run] | None]:
        """``runs_after`` in the background (sorting and writing release the GIL), on one thread
        for the process, so index writes never overlap."""
        return _WRITER.submit(self.runs_after, ledger, base_snapshot_id, new_rows)

    def runs_after(self, ledger: Table, base_snapshot_id: int | None, new_rows: pa.Table) -> list[Run] | None:
        """Write the run of ``new_rows`` (ledger rows with entity keys) and merge as the policy
        says: the runs of the snapshot appending them on ``base_snapshot_id``; None (write no
        index) if the base has none, since the new snapshot's would then be partial."""
        runs = self.runs(ledger, base_snapshot_id)
        if runs is None or self.index is None:
            return None
        try:
            self._bind(ledger)
            if isinstance(self.index, CachedKeyIndex):
                self.index.ensure(runs)  # fetched (or found in the cache): a run gone is an OSError
            for run in runs:  # an index with a run gone is not carried forward
                (self.index.folder / run.name).stat()
            return self.index.append(runs, key_index.index_rows(new_rows, self.contract))
        except OSError as exc:
            _unreadable(exc, "the new ledger snapshot gets no index (`lakepub compact` writes a complete one)")
            return None


def _unreadable(exc: OSError, consequence: str) -> None:
    warnings.warn(f"ledger key index unreadable ({' '.join(str(exc).split())}): {consequence}", stacklevel=3)


def scan_rows(con: duckdb.DuckDBPyConnection, ledger_sql: str, side: BatchSide | Entities, *, keyed: bool,
              keys: tuple[np.ndarray, np.ndarray] | None = None, history: bool = False,
              contract: Contract = ORDERS_CONTRACT, present: set[str] | None = None) -> Found:
    """The ledger rows of the batch's entities by one DuckDB join with the ledger read by the SQL
    table expression ``ledger_sql``.

    Joined on the entity keys when the ledger has them (two int64 columns: ~2x cheaper to scan
    than order_id strings; ``keys``: the entities' keys by the ledger's key function, default
    the current one), else on the contract's key fields. The join returns the entity's position
    rather than its key: no strings are materialised. With ``history`` (a compacted ledger), each
    found row's history entries (versions compaction dropped) are returned as rows too, without
    a floor. ``present``: the columns of the snapshot read (one from before a contract evolution
    lacks the fields it added: read as null).
    """
    entities = Entities.of(side, contract)
    payload = key_index.payload_schema(key_index.index_schema(contract))
    state = list(contract.state_names)
    position = pa.array(np.arange(entities.table.num_rows, dtype=np.int64))
    if keyed:
        k1, k2 = keys if keys is not None else entities.keys_for(None)
        probe = pa.table({"k1": k1, "k2": k2, "i": position})
        on = "l.k1 = o.k1 AND l.k2 = o.k2"
    else:
        probe = entities.table.select(list(contract.entity.key)).append_column("i", position)
        on = " AND ".join(f"l.{duck.name(k)} = o.{duck.name(k)}" for k in contract.entity.key)
    version = f"l.{duck.name(contract.entity.version)}"
    if contract.entity.version != "version" or contract.field(contract.entity.version).type.name != "long":
        version = f"CAST({version} AS BIGINT) AS version"
    columns = ", ".join([version, *(f"l.{duck.name(n)}" if present is None or n in present else f"NULL AS {duck.name(n)}"
                                    for n in state), "l.floor", *(["l.history"] if history else [])])
    con.register("lp_orders", probe)
    try:
        table = con.execute(f"""
            SELECT o.i, {columns}
            FROM {ledger_sql} AS l JOIN lp_orders AS o ON {on}""").to_arrow_table()
    finally:
        con.unregister("lp_orders")
    found, at = table.select(payload.names).cast(payload), table.column("i").to_numpy()
    if history:
        lists = table.column("history").combine_chunks()
        entries = pc.list_flatten(lists)
        if len(entries):
            parents = pc.list_parent_indices(lists).to_numpy()
            names = {entries.type.field(i).name for i in range(entries.type.num_fields)}
            dropped = pa.table([entries.field(n).cast(payload.field(n).type) if n in names
                                else pa.nulls(len(entries), payload.field(n).type) for n in ("version", *state)]
                               + [pa.nulls(len(entries), pa.int64())], schema=payload)
            found, at = pa.concat_tables([found, dropped]), np.concatenate([at, at[parents]])
    return found, at
