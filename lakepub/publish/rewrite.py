"""Apply per-day deltas to the affected partitions of the published table.

Only partitions containing a day with a non-zero delta are rewritten; every other
partition keeps its files. A correction that moves an order to another day retracts it from the
old day's partition and adds it to the new one in the same rewrite, so both change in one commit.

A day's total must stay within the int64 of the published ``cents`` column: ``check_totals``
refuses a publish (``SumOverflow``, exit 2) whose delta would take a day outside it. It is a
Python loop over the days the batch touches (a few hundred at most, microseconds), run by the
publisher before it writes anything.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date
from typing import Mapping

import pyarrow as pa

from lakepub.errors import LakepubError, SumOverflow
from lakepub.identity import recorded_checksum
from lakepub.store.layout import SUMMARY_ARROW, partition_label


@dataclass(frozen=True)
class PartitionRewrite:
    parts: dict[str, pa.Table]  # label -> the full new content of each affected partition left non-empty
    partitions: list[str]  # labels of the affected partitions (emptied ones included)
    checksums: dict[str, str]  # label -> checksum of its new content (empty partitions included)
    rows: dict[str, dict[date, tuple[int, int]]]  # label -> its new rows, day -> (cents, orders)


_INT64_MAX = 2 ** 63 - 1


def check_totals(dataset: str, current: Mapping[date, tuple[int, int]], deltas: dict[date, tuple[int, int]],
                 grain: str) -> None:
    """Refuse (``SumOverflow``) if applying ``deltas`` (exact ints) would take a day's total
    cents above int64 (``current`` holds at least the days of ``deltas``)."""
    for day, (d_cents, _) in deltas.items():
        cents = current.get(day, (0, 0))[0] + d_cents
        if cents > _INT64_MAX:
            raise SumOverflow(dataset, day, partition_label(day, grain), cents)


def rewrite_partitions(
    current: Mapping[date, tuple[int, int]],
    deltas: dict[date, tuple[int, int]],
    grain: str,
    dataset: str = "",
) -> PartitionRewrite:
    """The new content of every partition holding a day with a non-zero delta.

    ``current`` holds (at least) the current (cents, orders) of every day of those partitions.
    """
    check_totals(dataset, current, deltas, grain)
    labels = sorted({partition_label(day, grain) for day in deltas})
    merged = dict(current)  # days of other partitions, if any, are never read back below
    for day, (d_cents, d_orders) in deltas.items():
        cents, orders = merged.get(day, (0, 0))
        cents, orders = cents + d_cents, orders + d_orders
        if orders < 0 or cents < 0 or (orders == 0 and cents != 0):
            raise LakepubError(
                f"internal inconsistency on {day}: applying delta ({d_cents}, {d_orders}) to {merged.get(day)} "
                "gives a negative total; the published table does not match the ledger (run 'lakepub verify --deep')"
            )
        merged[day] = (cents, orders)

    by_partition: dict[str, list[tuple[date, int, int]]] = defaultdict(list)
    for day, (cents, orders) in sorted(merged.items()):
        if orders > 0:
            by_partition[partition_label(day, grain)].append((day, cents, orders))
    parts = {label: _summary_rows(by_partition[label]) for label in labels if by_partition.get(label)}
    rows = {label: {day: (cents, orders) for day, cents, orders in by_partition.get(label, [])} for label in labels}
    checksums = {label: recorded_checksum(by_partition.get(label, [])) for label in labels}
    return PartitionRewrite(parts=parts, partitions=labels, checksums=checksums, rows=rows)


def _summary_rows(rows: list[tuple[date, int, int]]) -> pa.Table:
    return pa.table(
        {
            "day": pa.array([r[0] for r in rows], pa.date32()),
            "cents": pa.array([r[1] for r in rows], pa.int64()),
            "orders": pa.array([r[2] for r in rows], pa.int64()),
        },
        schema=SUMMARY_ARROW,
    )
