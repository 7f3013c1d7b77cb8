"""Writing the affected partitions of the published table as ONE overwrite snapshot.

pyiceberg's ``Transaction.overwrite`` makes two snapshots (a delete, then an append), each
copying the table metadata. A publish only ever replaces whole partitions, so the files to drop
are exactly those the partition filter plans, and one ``overwrite`` snapshot can delete them and
add the new files. That halves the metadata work per publish and keeps one snapshot per publish.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
from pyiceberg.expressions import BooleanExpression
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.table import Table, Transaction


def replace_partitions(tx: Transaction, table: Table, rows: pa.Table, partitions: BooleanExpression,
                       snapshot_properties: dict[str, str]) -> None:
    """Stage in ``tx`` one snapshot replacing every file of the partitions matched by ``partitions``
    (a filter aligned to partition boundaries) with ``rows``."""
    old_files = [task.file for task in table.scan(row_filter=partitions).plan_files()] \
        if table.metadata.current_snapshot_id is not None else []
    new_files = list(_dataframe_to_data_files(table_metadata=tx.table_metadata, df=rows, io=table.io,
                                              write_uuid=uuid.uuid4())) if rows.num_rows else []
    with tx.update_snapshot(snapshot_properties=snapshot_properties).overwrite() as overwrite:
        for data_file in old_files:
            overwrite.delete_data_file(data_file)
        for data_file in new_files:
            overwrite.append_data_file(data_file)
