"""The ledger rows of a batch's orders, for the projection, and the key index a publish leaves.

Two ways to find them, same answer (``tests/test_key_index.py`` checks it):

* the ledger snapshot names key-index runs (``store/key_index.py``): binary searches in
  memory-mapped sorted runs, cost ~ batch x log(history);
* otherwise a DuckDB join of the batch's order keys with a scan of the ledger snapshot, cost ~
  history (a ledger created before the index or before order keys, or a remote warehouse).
"""

from __future__ import annotations

import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table

from lakepub import duck
from lakepub.publish.versioning import BatchSide
from lakepub.store import key_index
from lakepub.store.key_index import KeyIndex, Run
from lakepub.store.layout import has_history, has_order_keys, order_keys_version

_WRITER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakepub-index")
Found = tuple[pa.Table, np.ndarray]  # rows (key_index.PAYLOAD columns), position of each one's order


class LedgerLookup:
    """Looks up one dataset's ledger, by its key index where the snapshot has one."""

    def __init__(self, con: Callable[[], duckdb.DuckDBPyConnection], ledger_location: str, contract=None, *,
                 use_index: bool = True):
        self._con = con
        folder = key_index.folder_of(ledger_location) if use_index else None
        self.index = KeyIndex(folder) if folder is not None else None

    def runs(self, ledger: Table, snapshot_id: int | None) -> list[Run] | None:
        """The index runs holding every row of the ledger snapshot (``[]`` when there is none
        yet), or None if it has no index this lookup can use."""
        if self.index is None or not has_order_keys(ledger):
            return None
        snapshot = ledger.metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
        if snapshot_id is not None and snapshot is None:
            return None  # expired meanwhile: the scan reports it
        return key_index.runs_of(snapshot)

    def rows(self, ledger: Table, snapshot_id: int | None, side: BatchSide) -> Found:
        """The ledger rows (at ``snapshot_id``) of the batch's orders."""
        if snapshot_id is None or len(side.orders) == 0:
            return key_index.empty_payload(), np.zeros(0, dtype=np.int64)
        runs = self.runs(ledger, snapshot_id)
        keys = side.keys_for(order_keys_version(ledger))  # the function the ledger's keys were made with
        if runs is not None and self.index is not None:
            try:
                return self.index.lookup(runs, *keys)
            except OSError as exc:  # a run deleted by hand: the ledger itself is still whole
                _unreadable(exc, "this publish scans the ledger instead")
        return scan_rows(self._con(), duck.scan_sql(ledger.metadata_location, snapshot_id), side,
                         keyed=has_order_keys(ledger), keys=keys, history=has_history(ledger))

    def submit_runs_after(self, ledger: Table, base_snapshot_id: int | None, new_rows: pa.Table
                          ) -> Future[list[Run] | None]:
        """``runs_after`` in the background (sorting and writing release the GIL), on one thread
        for the process, so index writes never overlap."""
        return _WRITER.submit(self.runs_after, ledger, base_snapshot_id, new_rows)

    def runs_after(self, ledger: Table, base_snapshot_id: int | None, new_rows: pa.Table) -> list[Run] | None:
        """Write the run of ``new_rows`` (ledger rows with order keys) and merge as the policy
        says: the runs of the snapshot appending them on ``base_snapshot_id``; None (write no
        index) if the base has none, since the new snapshot's would then be partial."""
        runs = self.runs(ledger, base_snapshot_id)
        if runs is None or self.index is None:
            return None
        try:
            for run in runs:  # an index with a run gone is not carried forward
                (self.index.folder / run.name).stat()
            return self.index.append(runs, key_index.index_rows(new_rows))
        except OSError as exc:
            _unreadable(exc, "the new ledger snapshot gets no index (`lakepub compact` writes a complete one)")
            return None


def _unreadable(exc: OSError, consequence: str) -> None:
    warnings.warn(f"ledger key index unreadable ({' '.join(str(exc).split())}): {consequence}", stacklevel=3)


def scan_rows(con: duckdb.DuckDBPyConnection, ledger_sql: str, side: BatchSide, *, keyed: bool,
              keys: tuple[np.ndarray, np.ndarray] | None = None, history: bool = False) -> Found:
    """The ledger rows of the batch's orders by one DuckDB join with the ledger read by the SQL
    table expression ``ledger_sql``.

    Joined on the order keys when the ledger has them (two int64 columns: ~2x cheaper to scan
    than the strings; ``keys``: the orders' keys by the ledger's key function, default
    ``side.keys``), else on order_id. The join returns the order's position rather than its
    id: no strings are materialised. With ``history`` (a compacted ledger), each found row's
    history entries (versions compaction dropped) are returned as rows too, without a floor.
    """
    position = pa.array(np.arange(len(side.orders), dtype=np.int64))
    if keyed:
        k1, k2 = keys if keys is not None else side.keys
        probe = pa.table({"k1": k1, "k2": k2, "i": position})
        on = "l.k1 = o.k1 AND l.k2 = o.k2"
    else:
        probe = pa.table({"order_id": side.orders, "i": position})
        on = "l.order_id = o.order_id"
    con.register("lp_orders", probe)
    try:
        table = con.execute(f"""
            SELECT o.i, l.version, l.day, l.cents, l.deleted, l.floor{', l.history' if history else ''}
            FROM {ledger_sql} AS l JOIN lp_orders AS o ON {on}""").to_arrow_table()
    finally:
        con.unregister("lp_orders")
    found, at = table.select(key_index.PAYLOAD), table.column("i").to_numpy()
    if history:
        lists = table.column("history").combine_chunks()
        entries = pc.list_flatten(lists)
        if len(entries):
            parents = pc.list_parent_indices(lists).to_numpy()
            dropped = pa.table([entries.field(n) for n in ("version", "day", "cents", "deleted")]
                               + [pa.nulls(len(entries), pa.int64())], schema=found.schema)
            found, at = pa.concat_tables([found, dropped]), np.concatenate([at, at[parents]])
    return found, at
