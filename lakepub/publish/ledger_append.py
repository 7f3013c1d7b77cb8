"""The ledger's part of a publish: the batch's new ledger rows in the table's column order, and
the transaction that appends their file on top of the published ledger snapshot, naming the
key-index runs that hold every row of the new snapshot (``store/key_index.py``).

Moved out of ``publisher.py`` unchanged; the publisher calls both once per attempt.
"""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import pyarrow as pa
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, Transaction

from lakepub.store import key_index
from lakepub.store.commit import reset_main
from lakepub.store.write import append_files, transaction


def stage_ledger(ledger: Table, base: int | None, data_file: list[Future[DataFile]], batch_id: str,
                  runs: list[key_index.Run] | None | Future[list[key_index.Run] | None], tx: Transaction | None = None,
                  snapshot_id: int | None = None) -> Transaction:
    """A transaction appending the batch's ledger file (once written) on top of snapshot ``base``;
    its summary names the key-index ``runs`` that hold all its rows (if any; a future of them is
    waited for). ``tx``: one holding a schema evolution already (``publish/evolution.py``), the
    append staged after it. ``snapshot_id``: the new snapshot's id, chosen beforehand
    (``store.write.new_snapshot_id``): the published tables' records name it, and are staged
    while the ledger's file and key-index run are still being written."""
    tx = tx if tx is not None else transaction(ledger)
    reset_main(tx, base)  # drops an unpublished append left on the ledger's main
    props = {"lakepub.batch-id": batch_id}
    if isinstance(runs, Future):
        runs = runs.result()
    if runs is not None:
        props.update(key_index.properties(runs))
    append_files(tx, [f.result() for f in data_file], props, snapshot_id)
    if snapshot_id is not None and tx.table_metadata.current_snapshot_id != snapshot_id:
        raise AssertionError(f"the ledger append was staged as snapshot {tx.table_metadata.current_snapshot_id}, "
                             f"not {snapshot_id}")
    return tx


def ledger_rows(rows: pa.Table, batch_id: str, schema: pa.Schema) -> pa.Table:
    """The new ledger rows in ``schema``'s column order (the writer casts them to the table's schema)."""
    columns = {name: rows.column(name) for name in rows.column_names}
    # One dictionary entry: the writer's cast to string (in its pool thread) expands it.
    columns["batch_id"] = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows.num_rows, np.int32)),
                                                         pa.array([batch_id], pa.string()))
    columns["floor"] = pa.nulls(rows.num_rows, pa.int64())
    if "history" in schema.names:  # a compacted ledger: only compaction fills it
        columns["history"] = pa.nulls(rows.num_rows, schema.field("history").type)
    return pa.table([columns[name] for name in schema.names], names=schema.names)
