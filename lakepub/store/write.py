"""Writing the affected partitions of the published table as ONE overwrite snapshot.

pyiceberg's ``Transaction.overwrite`` makes two snapshots (a delete, then an append), each
copying the table metadata. A publish only ever replaces whole partitions, so the files to drop
are exactly the current files whose partition value is one of the rewritten partitions, and one
``overwrite`` snapshot can delete them and add the new files.

The files are chosen by their partition value rather than by planning a scan with a row filter:
pyiceberg evaluates such a filter per manifest entry in Python, which cost ~0.35 s per publish
over 36 partitions, against ~0.02 s for planning without a filter.
"""

from __future__ import annotations

import uuid
from datetime import date

import pyarrow as pa
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.table import Table, Transaction

from lakepub.store.layout import partition_range

_EPOCH = date(1970, 1, 1)


def partition_value(label: str, grain: str) -> int:
    """The Iceberg partition value (day/month/year transform of ``day``) of a partition label."""
    first, _ = partition_range(label, grain)
    if grain == "day":
        return (first - _EPOCH).days
    if grain == "month":
        return (first.year - 1970) * 12 + first.month - 1
    return first.year - 1970


def replace_partitions(tx: Transaction, table: Table, rows: pa.Table, labels: list[str], grain: str,
                       snapshot_properties: dict[str, str]) -> None:
    """Stage in ``tx`` one snapshot replacing every file of the partitions ``labels`` with ``rows``."""
    values = {partition_value(label, grain) for label in labels}
    old_files = [task.file for task in table.scan().plan_files() if task.file.partition[0] in values] \
        if table.metadata.current_snapshot_id is not None else []
    new_files = list(_dataframe_to_data_files(table_metadata=tx.table_metadata, df=rows, io=table.io,
                                              write_uuid=uuid.uuid4())) if rows.num_rows else []
    with tx.update_snapshot(snapshot_properties=snapshot_properties).overwrite() as overwrite:
        for data_file in old_files:
            overwrite.delete_data_file(data_file)
        for data_file in new_files:
            overwrite.append_data_file(data_file)
